#include "target/elf_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

namespace {

namespace fs = std::filesystem;
using bb::ElfFile;

constexpr const char* kStrippedVm = "/usr/lib/erlang/erts-13.1.5/bin/beam.smp";

// A file in a fresh temporary directory, removed with it.
class TempFile {
public:
    explicit TempFile(const std::string& contents) {
        dir_ = fs::temp_directory_path() /
               ("elf_file_test." + std::to_string(::getpid()) + "." + std::to_string(counter_++));
        fs::create_directories(dir_);
        std::ofstream(path()).write(contents.data(), std::streamsize(contents.size()));
    }
    ~TempFile() { fs::remove_all(dir_); }
    std::string path() const { return dir_ / "file"; }

private:
    static inline int counter_ = 0;
    fs::path dir_;
};

std::string slurp(const std::string& path, size_t max = SIZE_MAX) {
    std::ifstream in(path, std::ios::binary);
    std::string s;
    s.resize(std::min<size_t>(max, fs::file_size(path)));
    in.read(s.data(), std::streamsize(s.size()));
    return s;
}

// A file the test needs read (UserError, failing the test, when it cannot be).
ElfFile read_elf(const std::string& path) { return ElfFile::open(path).value_or_throw(""); }

// The file must be refused with one line that names it.
void expect_refused(const std::string& path) {
    auto elf = ElfFile::open(path);
    if (elf) {
        ADD_FAILURE() << path << " was read as ELF";
        return;
    }
    const std::string& msg = elf.error();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(ElfFile, StrippedDistributionVm) {
    ASSERT_TRUE(fs::exists(kStrippedVm)) << kStrippedVm << " is not installed (scripts/setup.sh installs erlang-base)";
    ElfFile elf = read_elf(kStrippedVm);
    EXPECT_EQ(elf.path(), kStrippedVm);
    EXPECT_EQ(elf.build_id(), "94bcd90b66fca38e41e627fa3a2ec089b2e498be");
    EXPECT_FALSE(elf.has_debug_info());
    EXPECT_EQ(elf.first_load_vaddr(), 0u);   // PIE
    EXPECT_GT(elf.symbols().size(), 4000u);  // .dynsym only

    auto gc = elf.find("erts_garbage_collect_nobump");
    ASSERT_TRUE(gc);
    EXPECT_TRUE(gc->is_func);
    EXPECT_GT(gc->size, 0u);
    EXPECT_EQ(gc->file_offset, 0x206940u);  // readelf: .text has sh_addr == sh_offset here
    EXPECT_EQ(gc->value, 0x206940u);
    for (const char* name : {"__jit_debug_descriptor", "erts_aligned_scheduler_data", "erts_proc"}) {
        auto sym = elf.find(name);
        ASSERT_TRUE(sym) << name;
        EXPECT_FALSE(sym->is_func) << name;
        EXPECT_NE(sym->value, 0u) << name;
    }
    EXPECT_FALSE(elf.find("malloc"));  // imported, i.e. undefined here
    EXPECT_FALSE(elf.find("no_such_symbol_in_beam"));

    std::set<std::pair<std::string, uint64_t>> seen;
    for (const auto& s : elf.symbols()) {
        EXPECT_FALSE(s.name.empty());
        EXPECT_TRUE(seen.emplace(s.name, s.value).second) << "duplicate " << s.name;
    }
}

// The agent reads beam.smp once per VM it follows: equal symbols are held once (the second VM
// of a build costs no copy), another file's are its own.
TEST(ElfFile, EqualSymbolsHeldOnce) {
    ASSERT_TRUE(fs::exists(kStrippedVm));
    ElfFile a = read_elf(kStrippedVm), b = read_elf(kStrippedVm), other = read_elf("/proc/self/exe");
    EXPECT_EQ(&a.symbols(), &b.symbols());
    EXPECT_NE(&a.symbols(), &other.symbols());
    EXPECT_EQ(a.find("erts_proc")->value, b.find("erts_proc")->value);
}

// glibc's debug file (libc6-dbg) spells its versioned symbols with their versions in .symtab
// ("pthread_getspecific@@GLIBC_2.34", 315 of them): named as the source names them.
TEST(ElfFile, SymbolVersionsAreNotPartOfNames) {
    ElfFile libc = read_elf("/lib/x86_64-linux-gnu/libc.so.6");
    const std::string path = "/usr/lib/debug/.build-id/" + libc.build_id().substr(0, 2) + "/" +
                             libc.build_id().substr(2) + ".debug";
    ASSERT_TRUE(fs::exists(path)) << path << " (libc6-dbg)";
    ElfFile debug = read_elf(path);
    size_t versioned = 0;
    for (const auto& s : debug.symbols()) versioned += s.name.find('@') != std::string::npos;
    EXPECT_EQ(versioned, 0u);
    ASSERT_TRUE(debug.find("pthread_getspecific"));
    EXPECT_EQ(debug.find("pthread_getspecific")->value, libc.find("pthread_getspecific")->value);
}

extern "C" __attribute__((noinline)) int bb_elf_test_probe_target(int x) { return x * 7 + 3; }

// The unit test binary has .symtab and (through vm_structs.c) DWARF; its code is mapped from the
// file, so file_offset and first_load_vaddr can be checked against what is really in memory.
TEST(ElfFile, ThisBinaryMatchesItsOwnMapping) {
    const std::string exe = fs::read_symlink("/proc/self/exe");
    ElfFile elf = read_elf(exe);
    EXPECT_TRUE(elf.has_debug_info());
    EXPECT_FALSE(elf.build_id().empty());

    auto sym = elf.find("bb_elf_test_probe_target");
    ASSERT_TRUE(sym) << "not in .symtab";
    EXPECT_TRUE(sym->is_func);
    const auto* code = reinterpret_cast<const char*>(&bb_elf_test_probe_target);
    std::ifstream in(exe, std::ios::binary);
    in.seekg(std::streamoff(sym->file_offset));
    char on_disk[16];
    ASSERT_TRUE(in.read(on_disk, sizeof on_disk));
    EXPECT_EQ(std::memcmp(on_disk, code, sizeof on_disk), 0);

    // The load bias, seen from the symbol and from the mapping of file offset 0, agrees.
    uint64_t bias = reinterpret_cast<uint64_t>(code) - sym->value;
    std::ifstream maps("/proc/self/maps");
    std::string line;
    uint64_t map_start = 0;
    while (std::getline(maps, line)) {
        std::istringstream f(line);
        std::string range, perms, offset, dev, inode, path;
        f >> range >> perms >> offset >> dev >> inode >> path;
        if (path == exe && std::stoull(offset, nullptr, 16) == 0) {
            map_start = std::stoull(range, nullptr, 16);
            break;
        }
    }
    ASSERT_NE(map_start, 0u);
    EXPECT_EQ(map_start - elf.first_load_vaddr(), bias);
}

TEST(ElfFile, MissingFile) { expect_refused("/nonexistent/dir/beam.smp"); }

TEST(ElfFile, Directory) { expect_refused("/tmp"); }

TEST(ElfFile, EmptyAndGarbageFiles) {
    TempFile empty("");
    expect_refused(empty.path());
    std::mt19937 rng(4242);
    std::string bytes(64 * 1024, '\0');
    for (char& c : bytes) c = char(rng());
    TempFile garbage(bytes);
    expect_refused(garbage.path());
}

// Truncated or corrupted ELF files must be refused or read partially, never crash.
TEST(ElfFile, TruncatedAndCorruptedElfNeverCrash) {
    const std::string source = fs::exists(kStrippedVm) ? kStrippedVm : "/proc/self/exe";
    const std::string whole = slurp(fs::canonical(source));
    for (size_t len : {size_t(4), size_t(52), size_t(64), size_t(200), size_t(4096), size_t(1) << 20, whole.size() / 2,
                       whole.size() - 1}) {
        TempFile cut(whole.substr(0, len));
        if (auto elf = ElfFile::open(cut.path()))
            for (const auto& s : elf->symbols()) EXPECT_FALSE(s.name.empty());
        else EXPECT_EQ(elf.error().find('\n'), std::string::npos);
    }
    // Flip bytes where the sizes and offsets libelf trusts are: the ELF header, the program
    // headers after it, and the section headers at e_shoff. This binary is the smaller victim.
    const std::string self = slurp(fs::read_symlink("/proc/self/exe"));
    uint64_t shoff = 0;
    std::memcpy(&shoff, self.data() + 0x28, sizeof shoff);
    ASSERT_LT(shoff, self.size());
    std::mt19937 rng(99);
    for (int round = 0; round < 16; round++) {
        std::string broken = self;
        for (int k = 0; k < 8; k++) broken[rng() % 1024] = char(rng());
        for (int k = 0; k < 40; k++) broken[shoff + rng() % (self.size() - shoff)] = char(rng());
        TempFile file(broken);
        (void)ElfFile::open(file.path());
    }
}

}  // namespace
