// The agent's directory of profiles (agent/profile_dir.hpp): private modes, and the disk it
// takes bounded by count, bytes and age, the directories of exited VMs removed with their
// last file.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent/profile_dir.hpp"
#include "temp_dir.hpp"

namespace {

using namespace bb::agent;
using bbt::TempDir;
namespace fs = std::filesystem;

mode_t mode_of(const fs::path& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

FinishedProfile profile(const std::string& dir_name, uint64_t start_s, size_t bytes) {
    FinishedProfile p;
    p.dir_name = dir_name;
    p.start_unix_ns = start_s * 1'000'000'000ull;
    p.pprof_gz.assign(bytes, 'x');
    return p;
}

// Sets a file's modification time `age_s` seconds before `now`.
void age(const fs::path& f, int64_t now, int64_t age_s) {
    timespec t[2] = {{now - age_s, 0}, {now - age_s, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, f.c_str(), t, 0), 0);
}

TEST(ProfileDir, FilesArePrivateWhateverTheUmask) {
    TempDir t;
    mode_t old = umask(0);  // the widest: every file 0666, every directory 0777
    {
        ProfileDir d((t.path / "out").string(), Retention{});
        std::string f = d.write(profile("svc-1", 1'700'000'000, 10));
        EXPECT_EQ(mode_of(t.path / "out"), 0700u);
        EXPECT_EQ(mode_of(t.path / "out" / "svc-1"), 0700u);
        EXPECT_EQ(mode_of(f), 0600u);
    }
    umask(old);
}

TEST(ProfileDir, AGroupMayRead) {
    TempDir t;
    ProfileDir d((t.path / "out").string(), Retention{}, "adm");  // a group every Debian system has
    std::string f = d.write(profile("svc-1", 1'700'000'000, 10));
    struct stat st;
    ASSERT_EQ(stat(f.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    EXPECT_EQ(st.st_gid, getgrnam("adm")->gr_gid);
    EXPECT_EQ(mode_of(t.path / "out" / "svc-1"), 0750u);
    EXPECT_THROW(ProfileDir((t.path / "o2").string(), Retention{}, "no-such-group-bb"), bb::UserError);
}

TEST(ProfileDir, AnOpenDirectoryMadeByTheOperatorIsSaid) {
    TempDir t;
    fs::create_directory(t.path / "out");
    chmod((t.path / "out").c_str(), 0755);
    ProfileDir d((t.path / "out").string(), Retention{});
    EXPECT_NE(d.warning().find("open to other users (mode 0755)"), std::string::npos) << d.warning();
}

TEST(ProfileDir, SweepKeepsTheBytesAndAgeBoundsAndRemovesExitedVms) {
    TempDir t;
    const int64_t now = 1'800'000'000;
    ProfileDir d(t.path.string(), Retention{0, 2500, 3600});
    // Three VMs, four files of 1000 bytes each; the oldest first.
    std::vector<std::string> files;
    for (int i = 0; i < 12; i++) {
        files.push_back(d.write(profile("vm-" + std::to_string(i % 3), 1'700'000'000 + i, 1000)));
        age(files.back(), now, 100 - i);
    }
    // A file that is not a profile, and a link to one elsewhere, are never removed.
    std::ofstream(t.path / "vm-0" / "notes.txt") << "operator's";
    std::ofstream(t.path / "elsewhere.pb.gz") << "x";
    fs::create_symlink(t.path / "elsewhere.pb.gz", t.path / "vm-1" / "cpu-20990101T000000.000Z.pb.gz");
    // Bytes: 12,000 > 2,500: the 10 oldest go, the two newest (vm-1 and vm-2's) stay.
    EXPECT_EQ(d.sweep({"vm-0", "vm-1", "vm-2"}, now), 10u);
    EXPECT_TRUE(fs::exists(files[10]));
    EXPECT_TRUE(fs::exists(files[11]));
    EXPECT_TRUE(fs::exists(t.path / "vm-0"));  // followed: kept, even empty of profiles
    EXPECT_TRUE(fs::exists(t.path / "vm-0" / "notes.txt"));
    EXPECT_TRUE(fs::exists(t.path / "elsewhere.pb.gz"));
    // Age: an hour and a bit later both are too old; vm-2 exited: its directory goes with them.
    EXPECT_EQ(d.sweep({"vm-1"}, now + 3700), 2u);
    EXPECT_FALSE(fs::exists(t.path / "vm-2"));
    EXPECT_TRUE(fs::exists(t.path / "vm-1"));
    EXPECT_TRUE(fs::exists(t.path / "vm-0"));  // not empty: the operator's file is there
}

}  // namespace
