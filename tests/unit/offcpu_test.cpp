// -e offcpu's names for what a thread waits in (run/offcpu.hpp): pure functions of what the
// kernel and the VM call things.
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "run/offcpu.hpp"

namespace bb {
namespace {

TEST(OffcpuNames, SystemCallsByTheirX86Numbers) {
    EXPECT_EQ(syscall_name(202), "futex");
    EXPECT_EQ(syscall_name(0), "read");
    EXPECT_EQ(syscall_name(232), "epoll_wait");
    EXPECT_EQ(syscall_name(230), "clock_nanosleep");
    EXPECT_EQ(syscall_name(271), "ppoll");
    EXPECT_EQ(syscall_name(999), "syscall 999");
    // Not in a system call: /proc says -1, the record's orig_ax is all ones.
    EXPECT_EQ(syscall_name(~uint64_t{0}), "syscall -1");
}

// Every name the table gives is the kernel's for that number: asm/unistd_64.h (linux-libc-dev,
// which the C library's headers need) is read, not copied.
TEST(OffcpuNames, EveryNamedCallIsTheKernelHeadersOwn) {
    std::ifstream in("/usr/include/x86_64-linux-gnu/asm/unistd_64.h");
    ASSERT_TRUE(in) << "no asm/unistd_64.h";
    std::map<uint64_t, std::string> kernel;
    static const std::regex define(R"(^#define __NR_(\w+) (\d+)$)");
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (std::regex_match(line, m, define)) kernel[std::stoull(m[2])] = m[1];
    }
    ASSERT_GT(kernel.size(), 300u);
    int named = 0;
    for (uint64_t nr = 0; nr < 512; nr++) {
        const std::string name = syscall_name(nr);
        if (name.starts_with("syscall ")) continue;
        named++;
        EXPECT_EQ(name, kernel[nr]) << nr;
    }
    EXPECT_GE(named, 45);
    EXPECT_EQ(syscall_name(87), "unlink");  // mnesia's and disk_log's file work, on a dirty I/O scheduler
}

TEST(OffcpuNames, TheVmsServiceThreadsOnEveryRelease) {
    // OTP 25
    EXPECT_EQ(thread_wait_frame("0_poller"), "[poll thread waiting]");
    EXPECT_EQ(thread_wait_frame("1_aux"), "[aux thread waiting]");
    EXPECT_EQ(thread_wait_frame("sys_sig_dispatc"), "[signal dispatcher waiting]");
    EXPECT_EQ(thread_wait_frame("sys_msg_dispatc"), "[system message dispatcher waiting]");
    EXPECT_EQ(thread_wait_frame("async_1"), "[async thread waiting]");
    // OTP 26 and later
    EXPECT_EQ(thread_wait_frame("erts_poll"), "[poll thread waiting]");
    EXPECT_EQ(thread_wait_frame("erts_aux"), "[aux thread waiting]");
    EXPECT_EQ(thread_wait_frame("erts_ssig_disp"), "[signal dispatcher waiting]");
    EXPECT_EQ(thread_wait_frame("erts_smsg_disp"), "[system message dispatcher waiting]");
    EXPECT_EQ(thread_wait_frame("erts_async"), "[async thread waiting]");
    EXPECT_EQ(thread_wait_frame("beam.smp"), "[main thread waiting]");
    // Anything else keeps its letters only: a thread name is the target's say.
    EXPECT_EQ(thread_wait_frame("my_nif_thr"), "[thread my_nif_thr]");
    EXPECT_EQ(thread_wait_frame("x\x1b[2J;y"), "[thread xJy]");
    EXPECT_EQ(thread_wait_frame("123"), "[thread ?]");
}

}  // namespace
}  // namespace bb
