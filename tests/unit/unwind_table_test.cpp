// The .eh_frame compiler (unwind_table.hpp) against binutils' readelf, which interprets the same
// CFI independently; and on garbage, which it must survive.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "target/elf_file.hpp"
#include "native/unwind_table.hpp"

namespace bb {
namespace {

const bb_unwind_row* row_at(const UnwindTable& t, uint64_t pc) {
    auto it = std::upper_bound(t.rows.begin(), t.rows.end(), pc,
                               [](uint64_t v, const bb_unwind_row& r) { return v < r.pc; });
    return it == t.rows.begin() ? nullptr : &*std::prev(it);
}

std::string run(const std::string& cmd) {
    std::string out;
    std::unique_ptr<FILE, decltype(&pclose)> p(popen(cmd.c_str(), "r"), &pclose);
    if (!p) return out;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p.get())) > 0) out.append(buf, n);
    return out;
}

// The CFA expressions of each FDE (its start address), as `readelf --debug-dump=frames` prints
// them: frames-interp only says "exp" where one is in force.
std::map<uint64_t, std::vector<std::string>> cfa_expressions(const std::string& path) {
    std::istringstream in(run("readelf --debug-dump=frames '" + path + "' 2>/dev/null"));
    std::map<uint64_t, std::vector<std::string>> out;
    std::string line;
    uint64_t fde = ~0ull;
    while (std::getline(in, line)) {
        if (size_t pc = line.find(" FDE "); pc != std::string::npos && line.find("pc=") != std::string::npos)
            fde = std::stoull(line.substr(line.find("pc=") + 3, 16), nullptr, 16);
        else if (line.find(" CIE") != std::string::npos) fde = ~0ull;
        else if (size_t at = line.find("DW_CFA_def_cfa_expression ("); at != std::string::npos && fde != ~0ull)
            out[fde].push_back(line.substr(at + 27, line.rfind(')') - at - 27));
    }
    return out;
}

// The stack offset of the one expression the walker follows (BB_CFA_RSP_DEREF), or nullopt.
std::optional<int> deref_offset(const std::string& expr) {
    int n = 0, used = 0;
    if (sscanf(expr.c_str(), "DW_OP_breg7 (rsp): %d; DW_OP_deref; DW_OP_plus_uconst: 8%n", &n, &used) == 1 &&
        used == int(expr.size()) && n % 8 == 0 && n / 8 >= INT16_MIN && n / 8 <= INT16_MAX)
        return n;
    return std::nullopt;
}

// N and K of a lazily bound PLT's rule (CFA = rsp + N, + 8 from the K-th byte of each 16-byte
// entry), or nullopt.
std::optional<std::pair<int, int>> plt_rule(const std::string& expr) {
    int n = 0, k = 0, used = 0;
    if (sscanf(expr.c_str(),
               "DW_OP_breg7 (rsp): %d; DW_OP_breg16 (rip): 0; DW_OP_lit15; DW_OP_and; DW_OP_lit%d; DW_OP_ge; "
               "DW_OP_lit3; DW_OP_shl; DW_OP_plus%n",
               &n, &k, &used) == 2 &&
        used == int(expr.size()))
        return std::pair{n, k};
    return std::nullopt;
}

// Every row `readelf --debug-dump=frames-interp` prints for `path`, checked against the table:
// the CFA rule and offset, where rbp is saved, and the return address at CFA-8. Where readelf
// says the CFA is an expression ("exp"), the FDE's expressions from the raw dump: a row of the
// one form the walker follows (rsp+N, deref, +8) must be BB_CFA_RSP_DEREF with one of the FDE's
// N, a PLT's rule rsp+N or rsp+N+8 at every byte to the FDE's end, any other BB_CFA_BAD.
// Returns the rows compared; `deref_rows` counts the first kind, `plt_bytes` the bytes of the second.
size_t compare_with_readelf(const std::string& path, size_t* deref_rows = nullptr, size_t* plt_bytes = nullptr) {
    UnwindTable t = compile_unwind_table(path);
    const auto exprs = cfa_expressions(path);
    uint64_t fde_start = 0, fde_end = 0;
    EXPECT_EQ(t.error, "") << path;
    std::istringstream in(run("readelf --debug-dump=frames-interp '" + path + "' 2>/dev/null"));
    std::string line;
    std::vector<std::string> columns;
    bool in_fde = false;
    size_t compared = 0, mismatches = 0;
    while (std::getline(in, line)) {
        if (line.find(" FDE ") != std::string::npos) {
            in_fde = true;
            columns.clear();
            // An FDE with no instructions of its own has the CIE's rule: CFA rsp+8.
            size_t pc = line.find("pc=");
            uint64_t start = std::stoull(line.substr(pc + 3, 16), nullptr, 16);
            fde_start = start;
            fde_end = std::stoull(line.substr(pc + 3 + 18, 16), nullptr, 16);
            if (auto f = t.function_at(start)) EXPECT_EQ(f->first, start) << path;
            else ADD_FAILURE() << path << ": no function at FDE start " << std::hex << start;
            continue;
        }
        if (line.find(" CIE ") != std::string::npos) in_fde = false;
        std::istringstream ls(line);
        std::vector<std::string> words{std::istream_iterator<std::string>(ls), {}};
        if (words.empty() || !in_fde) continue;
        if (words[0] == "LOC") {
            columns = words;
            continue;
        }
        if (columns.empty() || words.size() != columns.size()) continue;
        uint64_t loc = std::stoull(words[0], nullptr, 16);
        std::map<std::string, std::string> col;
        for (size_t i = 1; i < words.size(); i++) col[columns[i]] = words[i];
        const bb_unwind_row* r = row_at(t, loc);
        if (!r) {
            ADD_FAILURE() << path << ": no row at " << std::hex << loc;
            continue;
        }
        compared++;
        std::string cfa = col["CFA"];
        int want_rule = BB_CFA_BAD, want_off = 0, want_slot = 0;
        if (cfa.starts_with("rsp+")) want_rule = BB_CFA_RSP, want_off = std::stoi(cfa.substr(4));
        if (cfa.starts_with("rbp+")) want_rule = BB_CFA_RBP, want_off = std::stoi(cfa.substr(4));
        if (col.count("rbp") && col["rbp"].starts_with("c-")) want_slot = -std::stoi(col["rbp"].substr(2)) / 8;
        std::string ra = col["ra"];
        if (ra == "u") want_rule = BB_CFA_END;
        else if (ra != "c-8") want_rule = BB_CFA_BAD;
        bool same = r->cfa_rule == want_rule && (want_rule != BB_CFA_RSP && want_rule != BB_CFA_RBP
                                                     ? true
                                                     : 8 * r->cfa_words == want_off && r->rbp_slot == want_slot);
        if (cfa == "exp" && ra == "c-8" && exprs.count(fde_start)) {
            bool followed = false, offset_listed = false;
            for (const auto& e : exprs.at(fde_start)) {
                auto n = deref_offset(e);
                followed |= n.has_value();
                offset_listed |= n && *n == 8 * static_cast<int16_t>(r->cfa_words);
            }
            if (r->cfa_rule == BB_CFA_RSP_DEREF) {
                same = followed && offset_listed && r->rbp_slot == want_slot;
                if (deref_rows) ++*deref_rows;
            }
            if (auto plt = exprs.at(fde_start).size() == 1 ? plt_rule(exprs.at(fde_start)[0]) : std::nullopt) {
                same = true;
                for (uint64_t pc = loc; pc < fde_end && same; pc++) {
                    const bb_unwind_row* p = row_at(t, pc);
                    int want = plt->first + ((pc & 15) >= uint64_t(plt->second) ? 8 : 0);
                    same = p && p->cfa_rule == BB_CFA_RSP && 8 * p->cfa_words == want && p->rbp_slot == 0;
                    if (plt_bytes) ++*plt_bytes;
                }
            }
        }
        // A register rule readelf prints for rbp that the table cannot follow makes the row BAD.
        if (!same && r->cfa_rule == BB_CFA_BAD && col.count("rbp") && col["rbp"] != "u" &&
            !col["rbp"].starts_with("c-"))
            same = true;
        if (!same && mismatches++ < 5)
            ADD_FAILURE() << path << " at " << std::hex << loc << ": readelf says CFA " << cfa << " rbp " << col["rbp"]
                          << " ra " << ra << "; table has rule " << std::dec << int(r->cfa_rule) << " offset "
                          << 8 * r->cfa_words << " rbp slot " << int(r->rbp_slot);
    }
    EXPECT_EQ(mismatches, 0u) << path;
    return compared;
}

TEST(UnwindTable, AgreesWithReadelfOnThisBinaryAndLibc) {
    // Resolved here: in readelf's process /proc/self is readelf.
    size_t self = compare_with_readelf(std::filesystem::read_symlink("/proc/self/exe").string());
    size_t libc = compare_with_readelf("/lib/x86_64-linux-gnu/libc.so.6");
    // Real files have thousands of rows: a parser that read none would compare nothing.
    EXPECT_GT(self, 1000u);
    EXPECT_GT(libc, 10000u);
}

// A lazily bound .plt (Debian's beam.smp has 270 entries) has one CFA expression for all its
// entries: compiled to two rows an entry, so that a sample in a stub (a BIF calling memcpy)
// unwinds on to the function that called it.
TEST(UnwindTable, PltRowsAreFollowed) {
    const std::string beam = "/usr/lib/erlang/erts-13.1.5/bin/beam.smp";  // erlang-base
    ASSERT_TRUE(std::filesystem::exists(beam)) << beam;
    size_t plt = 0;
    compare_with_readelf(beam, nullptr, &plt);
    EXPECT_GT(plt, 16u * 200) << "bytes of .plt compared";
}

// OpenSSL realigns its stack in its AVX2 routines (SHA-256 where the CPU has no SHA extensions)
// and says so with `.cfi_cfa_expression %rsp+N,deref,+8`: those rows are followed, the rest of
// libcrypto as readelf interprets it.
TEST(UnwindTable, OpenSslStackRealigningRowsAreFollowed) {
    const std::string libcrypto = "/usr/lib/x86_64-linux-gnu/libcrypto.so.3";
    ASSERT_TRUE(std::filesystem::exists(libcrypto)) << "libssl3 is not installed (erlang-crypto needs it)";
    size_t deref = 0;
    size_t rows = compare_with_readelf(libcrypto, &deref);
    EXPECT_GT(rows, 10000u);
    EXPECT_GT(deref, 20u) << "no row of OpenSSL's stack-realigning code is followed";
}

TEST(UnwindTable, RowsAreSortedAndGapsEndTheWalk) {
    UnwindTable t = compile_unwind_table(std::string("/lib/x86_64-linux-gnu/libc.so.6"));
    ASSERT_FALSE(t.rows.empty());
    for (size_t i = 1; i < t.rows.size(); i++) ASSERT_LT(t.rows[i - 1].pc, t.rows[i].pc);
    // Between two functions with code no FDE covers, a NONE row.
    size_t gaps = 0;
    for (size_t i = 1; i < t.functions.size(); i++)
        if (t.functions[i - 1].second < t.functions[i].first) {
            const bb_unwind_row* r = row_at(t, t.functions[i - 1].second);
            ASSERT_NE(r, nullptr);
            EXPECT_EQ(r->cfa_rule, BB_CFA_NONE);
            gaps++;
        }
    EXPECT_GT(gaps, 0u);
    EXPECT_EQ(row_at(t, 0), nullptr);
    // The walker's buckets: each names the row that covers its first address.
    uint64_t lo = t.rows.front().pc;
    ASSERT_EQ(t.buckets.size(), (t.rows.back().pc - lo) / BB_UNWIND_BUCKET + 1);
    for (size_t b = 0; b < t.buckets.size(); b++)
        ASSERT_EQ(&t.rows[t.buckets[b]], row_at(t, lo + b * BB_UNWIND_BUCKET)) << b;
}

TEST(UnwindTable, FunctionStartsAreTheSymbols) {
    // In libc, every exported function with a size starts an FDE (what names functions that
    // have no symbol in a stripped binary).
    const std::string libc = "/lib/x86_64-linux-gnu/libc.so.6";
    UnwindTable t = compile_unwind_table(libc);
    ElfFile elf = ElfFile::open(libc).value_or_throw("");
    size_t funcs = 0, match = 0;
    for (const auto& s : elf.symbols()) {
        if (!s.is_func || s.size == 0) continue;
        funcs++;
        auto f = t.function_at(s.value);
        match += f && f->first == s.value;
    }
    ASSERT_GT(funcs, 1000u);
    EXPECT_GT(double(match) / funcs, 0.95) << match << " of " << funcs;
}

TEST(UnwindTable, NotElfIsAnError) {
    const char junk[] = "this is not an ELF file at all, just bytes";
    UnwindTable t = compile_unwind_table(junk, sizeof(junk));
    EXPECT_NE(t.error, "");
    EXPECT_TRUE(t.rows.empty());
    EXPECT_NE(compile_unwind_table(std::string("/nonexistent/file")).error, "");
}

// Truncated files and flipped bytes: a result (maybe empty, maybe with errors) with sorted rows,
// never a crash (the sanitizer build and fuzz_unwind go further).
TEST(UnwindTable, SurvivesTruncationAndCorruption) {
    std::ifstream in("/lib/x86_64-linux-gnu/libc.so.6", std::ios::binary);
    std::string bytes{std::istreambuf_iterator<char>(in), {}};
    ASSERT_GT(bytes.size(), 100000u);
    size_t full = compile_unwind_table(bytes.data(), bytes.size()).rows.size();
    std::mt19937 rng(42);
    for (int round = 0; round < 40; round++) {
        std::string b = bytes;
        if (round % 2) {
            b.resize(rng() % bytes.size());
        } else {
            for (int k = 0; k < 200; k++) b[rng() % b.size()] ^= static_cast<char>(1 + rng() % 255);
        }
        UnwindTable t = compile_unwind_table(b.data(), b.size());
        for (size_t i = 1; i < t.rows.size(); i++) ASSERT_LT(t.rows[i - 1].pc, t.rows[i].pc);
        EXPECT_LE(t.rows.size(), full * 2 + 1000);
    }
}

// What fuzz_unwind found, kept in its seed corpus: rows of a .plt range that ran past the next
// FDE (unsorted rows), and CFI programs naming a register in the hundreds of millions, for which
// libdw sized every frame state at up to 2 GiB (out of memory, 25 s a file): refused before
// libdw runs them (native/cfi_bounds.hpp).
TEST(UnwindTable, FuzzFindingsStayFixed) {
    int huge = 0;
    for (const auto& entry : std::filesystem::directory_iterator(BB_SOURCE_DIR "/tests/fuzz/corpus/unwind")) {
        std::ifstream in(entry.path(), std::ios::binary);
        std::string b{std::istreambuf_iterator<char>(in), {}};
        UnwindTable t = compile_unwind_table(b.data(), b.size());
        for (size_t i = 1; i < t.rows.size(); i++) ASSERT_LT(t.rows[i - 1].pc, t.rows[i].pc) << entry.path();
        for (const auto& f : t.functions) ASSERT_LT(f.first, f.second) << entry.path();
        if (entry.path().filename().string().starts_with("huge-cfi-register")) {
            huge++;
            EXPECT_NE(t.error.find("names register"), std::string::npos) << entry.path() << ": " << t.error;
            EXPECT_TRUE(t.rows.empty()) << entry.path();
        }
    }
    EXPECT_GE(huge, 1);
}

// The same check passes every file of a real VM: Debian's beam.smp and the libraries it maps.
TEST(UnwindTable, RealFilesAreWithinTheCfiBounds) {
    for (const char* path : {"/usr/lib/erlang/erts-13.1.5/bin/beam.smp", "/lib/x86_64-linux-gnu/libc.so.6",
                             "/lib/x86_64-linux-gnu/libcrypto.so.3", "/lib/x86_64-linux-gnu/libstdc++.so.6"}) {
        UnwindTable t = compile_unwind_table(std::string(path));
        EXPECT_EQ(t.error, "") << path;
        EXPECT_GT(t.rows.size(), 1000u) << path;
    }
}

}  // namespace
}  // namespace bb
