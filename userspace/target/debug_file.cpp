#include "target/debug_file.hpp"
#include "target/elf_file.hpp"

#include <elfutils/debuginfod.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <vector>

namespace bb {
namespace {

bool is_hex(const std::string& s) { return s.find_first_not_of("0123456789abcdef") == std::string::npos; }

// The file at `path` is an ELF file with this build-id (a debug file a server or a package put
// there for another build is not this one's).
bool carries(const std::string& path, const std::string& build_id) {
    auto elf = ElfFile::open(path);
    return elf && elf->build_id() == build_id;
}

}  // namespace

Result<DebugFile> find_debug_file(const std::string& build_id) {
    std::string where;
    if (build_id.size() < 4 || build_id.size() > 128 || !is_hex(build_id))
        return Fail{"it has no build-id to find a debug file by"};
    const std::string local = "/usr/lib/debug/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug";
    if (carries(local, build_id)) return DebugFile{local, "/usr/lib/debug"};
    where = local;

    const char* urls = std::getenv("DEBUGINFOD_URLS");
    if (urls && *urls) {
        std::vector<unsigned char> id;
        for (size_t i = 0; i + 1 < build_id.size(); i += 2) id.push_back(std::stoi(build_id.substr(i, 2), nullptr, 16));
        std::unique_ptr<debuginfod_client, decltype(&debuginfod_end)> client(debuginfod_begin(), debuginfod_end);
        char* path = nullptr;
        int fd = client ? debuginfod_find_debuginfo(client.get(), id.data(), int(id.size()), &path) : -1;
        if (fd >= 0) ::close(fd);
        std::string cached = path ? path : "";
        std::free(path);
        if (fd >= 0 && carries(cached, build_id)) return DebugFile{cached, "debuginfod"};
        where += ", debuginfod (DEBUGINFOD_URLS)";
    } else {
        where += "; DEBUGINFOD_URLS is not set";
    }
    return Fail{where};
}

}  // namespace bb
