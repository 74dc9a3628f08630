// libFuzzer target: ELF reading (elf_file.hpp) and the DWARF offsets reader (offsets_dwarf.hpp) on
// arbitrary bytes, as they would meet a corrupt or hostile beam.smp. The bytes go into a
// memfd, read through its /proc/self/fd path as a file on disk would be.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "target/elf_file.hpp"
#include "target/offsets_dwarf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    int fd = memfd_create("bb-fuzz-elf", MFD_CLOEXEC);
    if (fd < 0) return 0;
    if (write(fd, data, size) != ssize_t(size)) {
        close(fd);
        return 0;
    }
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    if (auto elf = bb::ElfFile::open(path)) {
        for (const auto& s : elf->symbols()) (void)elf->find(s.name);
        (void)elf->machine_name();
    }  // else refused with a message: fine
    (void)bb::offsets_from_dwarf(path);
    close(fd);
    return 0;
}
