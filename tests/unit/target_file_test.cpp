// Target files opened as the mapping's own inode (target/target_file.hpp), the bounded version
// scan, and reports written atomically (run/output.hpp), on this test process's own mappings
// and temporary files.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "run/output.hpp"
#include "target/proc_maps.hpp"
#include "target/release.hpp"
#include "target/target_file.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using bbt::TempDir;

// A file of `bytes` mapped into this process, then unlinked: a library deleted while mapped.
struct MappedTemp {
    void* at = MAP_FAILED;
    size_t size = 0;
    MappedTemp(const std::string& path, const std::string& bytes) {
        std::ofstream(path, std::ios::binary) << bytes;
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        size = bytes.size();
        at = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
    }
    ~MappedTemp() {
        if (at != MAP_FAILED) munmap(at, size);
    }
    std::optional<bb::Mapping> mapping() const {
        for (const auto& m : bb::read_maps(getpid()))
            if (m.start == reinterpret_cast<uint64_t>(at)) return m;
        return std::nullopt;
    }
};

TEST(TargetFile, DeletedMappingIsOpenedAsItsInodeNotByItsName) {
    TempDir dir;
    const std::string path = (dir.path / "lib.so").string();
    MappedTemp mapped(path, std::string(10000, 'x'));
    ASSERT_NE(mapped.at, MAP_FAILED);
    ASSERT_EQ(unlink(path.c_str()), 0);
    // What a hostile process plants at the name its deleted mapping shows: a FIFO, which an
    // open() for reading would wait on forever.
    ASSERT_EQ(mkfifo((path + " (deleted)").c_str(), 0644), 0);
    auto m = mapped.mapping();
    ASSERT_TRUE(m);
    ASSERT_TRUE(m->deleted());

    auto f = bb::open_mapped_file(getpid(), *m);
    ASSERT_TRUE(f) << f.error();
    EXPECT_EQ(f->size, 10000u);
    EXPECT_TRUE(f->deleted);
    EXPECT_EQ(f->name, path);
    auto bytes = f->read(9990, 100);
    ASSERT_TRUE(bytes);
    EXPECT_EQ(std::string(bytes->begin(), bytes->end()), std::string(10, 'x'));

    // A mapping that claims another inode is refused, as is one over the size cap.
    bb::Mapping other = *m;
    other.inode++;
    EXPECT_FALSE(bb::open_mapped_file(getpid(), other));
    EXPECT_FALSE(bb::open_mapped_file(getpid(), *m, 9999));
}

TEST(TargetFile, ExecutableFoundByItsInode) {
    auto maps = bb::read_maps(getpid());
    auto exe = bb::exe_mapping(getpid(), maps);
    ASSERT_TRUE(exe);
    auto f = bb::open_mapped_file(getpid(), *exe);
    ASSERT_TRUE(f) << f.error();
    EXPECT_EQ(f->name, fs::read_symlink("/proc/self/exe").string());
}

// The version string is found across the boundary of two 1 MiB reads, and not past the cap.
TEST(TargetFile, VersionScanIsChunkedAndBounded) {
    TempDir dir;
    const std::string version =
        "Erlang/OTP 25%s [erts-13.1.5] [source] [64-bit] [smp:%beu:%beu] "
        "[ds:%beu:%beu:%beu] [async-threads:%d] [jit:ns%s]";
    std::string bytes(3u << 20, '\0');
    const size_t at = (1u << 20) - 40;  // starts in the first read, ends in the second
    bytes.replace(at, version.size(), version);
    const std::string path = (dir.path / "beam.smp").string();
    std::ofstream(path, std::ios::binary) << bytes;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    auto b = bb::read_vm_build_fd(fd, 64u << 20);
    ASSERT_TRUE(b);
    EXPECT_EQ(b->describe(), "OTP 25 (erts-13.1.5, jit)");
    EXPECT_FALSE(bb::read_vm_build_fd(fd, at + 10));  // cut inside the string
    close(fd);
}

// A report goes to a temporary and is renamed over its name: a symlink planted there is
// replaced, the file it points to untouched.
TEST(Output, WrittenAtomicallyNeverThroughASymlink) {
    TempDir dir;
    const std::string secret = (dir.path / "secret").string(), out = (dir.path / "profile.folded").string();
    std::ofstream(secret) << "keep";
    ASSERT_EQ(symlink(secret.c_str(), out.c_str()), 0);
    bb::write_file_atomically(out, "a;b 1\n");
    struct stat st;
    ASSERT_EQ(lstat(out.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    std::stringstream written, kept;
    written << std::ifstream(out).rdbuf();
    kept << std::ifstream(secret).rdbuf();
    EXPECT_EQ(written.str(), "a;b 1\n");
    EXPECT_EQ(kept.str(), "keep");
    size_t entries = 0;
    for (const auto& e : fs::directory_iterator(dir.path)) entries += !e.path().filename().string().starts_with(".");
    EXPECT_EQ(entries, 2u);  // and no temporary left
    EXPECT_THROW(bb::write_file_atomically((dir.path / "no/such/dir/f").string(), "x"), bb::UserError);
}

// A character device or a FIFO is written in place, never renamed over: as root, -o /dev/null
// replaced the host's /dev/null with a regular file.
TEST(Output, DevicesAndFifosAreWrittenInPlace) {
    bb::write_file_atomically("/dev/null", "a;b 1\n");
    struct stat st;
    ASSERT_EQ(lstat("/dev/null", &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    TempDir dir;
    const std::string fifo = (dir.path / "fifo").string();
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT_GE(reader, 0);
    bb::write_file_atomically(fifo, "a;b 1\n");
    char buf[16] = {};
    EXPECT_EQ(read(reader, buf, sizeof buf), 6);
    close(reader);
    ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

}  // namespace
