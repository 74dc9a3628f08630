#include "inspect/procs_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "inspect/find_process.hpp"
#include "inspect/heap_inspect.hpp"
#include "inspect/process_table.hpp"
#include "inspect/sched_util.hpp"
#include "profile/frames.hpp"

namespace bb {

ProcessTable read_checked_table(const Vm& vm, const TableReads& reads) {
    ProcessTable table = read_process_table(vm, reads);
    if (auto why = table.sizes_mismatch(); !why.empty())
        throw UserError(fmt::format("the Process sizes do not read right on this build ({}): offsets from {}", why,
                                    vm.offsets().origin));
    return table;
}

std::string ProcsContext::function(uint64_t mfa, uint64_t addr) {
    if (mfa) {
        auto w = vm.mem().read<std::array<uint64_t, 3>>(mfa);
        if (w) {
            auto text = names.mfa_text((*w)[0], (*w)[1], (*w)[2]);
            if (!text.empty()) return text;
        }
    }
    if (auto name = jit_name(addr)) return raw_names ? *name : display_name(*name);
    return "";
}

namespace {

struct Row {
    const ProcessEntry* p;
    std::string pid, name, initial, current;
    int64_t d_memory = 0, d_queue = 0, d_binary = 0;
    uint64_t d_reds = 0;
    bool fresh = false;  // not in the previous reading (--watch)
};

// Its names are the target's text: printable (base/text.hpp) from here on, in the table and JSON.
Row make_row(ProcsContext& c, const ProcessEntry& e) {
    Row r{&e, c.vm.format_pid(e.pid), printable(c.names.name(e.pid, e.c_p, e.reg_name, e.initial)), {}, {}};
    r.initial = printable(c.names.mfa_text(e.initial[0], e.initial[1], e.initial[2]));
    // Where it is: the function the VM last noted, else the one its resume address is in.
    r.current = printable(c.function(e.current, e.i));
    return r;
}

// The NAME column: as wide as the longest name shown (at least its heading, at most 48), a
// longer name cut with "...": CURRENT stays aligned whatever the target calls its processes.
constexpr size_t kNameWidthMax = 48;

size_t name_width(const std::vector<Row>& rows) {
    size_t w = 4;
    for (const Row& r : rows) w = std::max(w, r.name.size());
    return std::min(w, kNameWidthMax);
}

// The figures' columns of a table, then NAME and CURRENT. In a terminal of `columns` columns
// (0: piped, no limit) the optional ones go first, right to left, until a name and a function
// have room; NAME and CURRENT then share what is left, NAME two fifths of it at most, each cut
// at its end. The layout depends on `columns` and `name_natural` alone: --watch passes the
// widest NAME may be, so that its columns stay where they are from one refresh to the next.
struct Column {
    const char* head;
    size_t width;
    bool optional = false;
    bool left = false;
};

struct Layout {
    std::vector<bool> shown;
    size_t name = 0, current = 0;  // current 0: not cut
};

Layout lay_out(const std::vector<Column>& cols, size_t name_natural, size_t columns) {
    Layout l{std::vector<bool>(cols.size(), true), std::min(name_natural, kNameWidthMax), 0};
    if (columns == 0) return l;
    auto fixed = [&] {
        size_t w = 0;
        for (size_t i = 0; i < cols.size(); i++) w += l.shown[i] ? cols[i].width + 1 : 0;
        return w;
    };
    constexpr size_t kMinName = 16, kMinCurrent = 24;  // room to read a name and a function
    for (size_t i = cols.size(); i-- > 0 && fixed() + kMinName + 1 + kMinCurrent > columns;)
        if (cols[i].optional) l.shown[i] = false;
    const size_t avail = columns > fixed() + 9 ? columns - fixed() : 9;  // too narrow: 4 and 4, and it wraps
    l.name = std::clamp<size_t>(std::min(l.name, avail * 2 / 5), 4, kNameWidthMax);
    l.current = avail - l.name - 1;
    return l;
}

// One line of the table: `cells` are the figures, one per column (those not shown skipped).
std::string table_line(const std::vector<Column>& cols, const Layout& l, const std::vector<std::string>& cells,
                       const std::string& name, const std::string& current) {
    std::string out;
    for (size_t i = 0; i < cols.size(); i++) {
        if (!l.shown[i]) continue;
        out += cols[i].left ? fmt::format("{:<{}} ", cells[i], cols[i].width)
                            : fmt::format("{:>{}} ", cells[i], cols[i].width);
    }
    return out + fmt::format("{:<{}} {}", fit(name, l.name), l.name, fit(current, l.current));
}

std::vector<std::string> headings(const std::vector<Column>& cols) {
    std::vector<std::string> out;
    for (const Column& c : cols) out.push_back(c.head);
    return out;
}

nlohmann::json row_json(const Row& r, uint32_t proc_size) {
    const ProcessEntry& e = *r.p;
    return {{"pid", r.pid},
            {"name", r.name},
            {"initial_call", r.initial},
            {"current_function", r.current},
            {"status", e.status()},
            {"memory", e.memory(proc_size)},
            {"binary_bytes", e.binary_bytes},
            {"binary_count", e.binary_count},
            {"heap_size", e.heap_sz},
            {"old_heap_size", e.old_heap_sz},
            {"heap_fragments_size", e.mbuf_sz},
            {"total_heap_size", e.total_heap_sz()},
            {"stack_size", e.stack_sz},
            {"message_queue_len", e.msgq_len},
            {"message_queue_data", e.queue_bytes},
            {"queued_messages", e.queued_messages},
            {"dictionary_bytes", e.dict_bytes},
            {"reductions", e.reds}};
}

// The order of --sort, on the figures (a snapshot) or on their growth (--watch).
uint64_t figure(const std::string& sort, const ProcessEntry& e, uint32_t proc_size) {
    if (sort == "binary") return e.binary_bytes;
    if (sort == "heap") return e.total_heap_sz();
    if (sort == "stack") return e.stack_sz;
    if (sort == "queue") return static_cast<uint64_t>(std::max<int64_t>(e.msgq_len, 0));
    if (sort == "reductions") return e.reds;
    return e.memory(proc_size);
}

}  // namespace

int procs_table(ProcsContext& c, const ProcsOptions& o) {
    const uint32_t proc_size = c.vm.offsets().proc_size;
    uint64_t t0 = monotonic_ns();
    ProcessTable table = read_checked_table(c.vm, {.binaries = &c.vm.release().terms, .each_binary = {}});
    uint64_t read_ns = monotonic_ns() - t0;

    std::vector<const ProcessEntry*> order;
    for (const auto& e : table.processes) order.push_back(&e);
    std::stable_sort(order.begin(), order.end(),
                     [&](auto* a, auto* b) { return figure(o.sort, *a, proc_size) > figure(o.sort, *b, proc_size); });
    if (!o.all && order.size() > o.top) order.resize(o.top);
    std::vector<Row> rows;
    for (const ProcessEntry* e : order) rows.push_back(make_row(c, *e));

    if (o.json) {
        nlohmann::json j;
        j["vm_pid"] = c.vm.pid();
        j["otp_release"] = c.vm.release().major;
        j["processes_total"] = table.processes.size();
        j["unreadable"] = table.unreadable;
        j["partial"] = table.partial;
        j["read_ms"] = read_ns / 1e6;
        j["processes"] = nlohmann::json::array();
        for (const Row& r : rows) j["processes"].push_back(row_json(r, proc_size));
        std::cout << json_text(j, 1) << "\n";
        return 0;
    }
    fmt::print("beam-bpf-procs: {} processes of {} {} (OTP {}), {} unreadable, read in {:.1f} ms\n",
               table.processes.size(), printable(c.vm.exe_name()), c.vm.pid(), c.vm.release().major, table.unreadable,
               read_ns / 1e6);
    if (!c.names.unavailable().empty())
        fmt::print("beam-bpf-procs: warning: no names: {}\n", printable(c.names.unavailable()));
    static const std::vector<Column> cols{
        {"PID", 14, false, true}, {"MEMORY", 9}, {"BINARY", 9, true}, {"HEAP", 10, true},
        {"STACK", 7, true},       {"MSGQ", 7},   {"REDS", 12},        {"STATUS", 18, false, true}};
    const Layout l = lay_out(cols, name_width(rows), o.columns);
    fmt::print("{}\n", table_line(cols, l, headings(cols), "NAME", "CURRENT"));
    for (const Row& r : rows) {
        const ProcessEntry& e = *r.p;
        fmt::print("{}\n", table_line(cols, l,
                                      {r.pid, human_bytes(e.memory(proc_size)), human_bytes(e.binary_bytes),
                                       std::to_string(e.total_heap_sz()), std::to_string(e.stack_sz),
                                       std::to_string(e.msgq_len), std::to_string(e.reds), e.status()},
                                      r.name, r.current));
    }
    return 0;
}

// --watch: the table again every interval, ranked by what grew in it.
int procs_watch(ProcsContext& c, const ProcsOptions& o) {
    const uint32_t proc_size = c.vm.offsets().proc_size;
    const bool tty = isatty(STDOUT_FILENO);
    std::unordered_map<uint64_t, ProcessEntry> prev;
    const TableReads reads{.binaries = &c.vm.release().terms, .each_binary = {}};
    for (const auto& e : read_checked_table(c.vm, reads).processes) prev[e.pid] = e;
    // The interval is spent watching the schedulers' busy state (inspect/sched_util.hpp).
    SchedUtil util(c.vm);
    for (size_t n = 0; o.count == 0 || n < o.count; n++) {
        const std::vector<SchedBusy> busy = util.watch(o.watch);
        // The VM ending is the end of the watch, not a failure to read it (it may end mid-read).
        std::optional<ProcessTable> read;
        try {
            if (c.vm.alive()) read = read_checked_table(c.vm, reads);
        } catch (const UserError&) {
            if (c.vm.alive()) throw;
        }
        if (!read) {
            fmt::print(stderr, "beam-bpf-procs: the VM (pid {}) exited after {} intervals\n", c.vm.pid(), n);
            return 0;
        }
        const ProcessTable& table = *read;
        std::vector<Row> rows;
        for (const ProcessEntry& e : table.processes) {
            auto it = prev.find(e.pid);
            Row r{&e, "", "", "", ""};
            if (it == prev.end()) {
                r.fresh = true;
                r.d_memory = static_cast<int64_t>(e.memory(proc_size));
                r.d_queue = e.msgq_len;
                r.d_binary = static_cast<int64_t>(e.binary_bytes);
                r.d_reds = e.reds;
            } else {
                r.d_memory = static_cast<int64_t>(e.memory(proc_size)) -
                             static_cast<int64_t>(it->second.memory(proc_size));
                r.d_queue = e.msgq_len - it->second.msgq_len;
                r.d_binary = static_cast<int64_t>(e.binary_bytes) - static_cast<int64_t>(it->second.binary_bytes);
                r.d_reds = e.reds >= it->second.reds ? e.reds - it->second.reds : 0;
            }
            rows.push_back(r);
        }
        auto growth = [&](const Row& r) -> int64_t {
            if (o.sort == "reductions") return static_cast<int64_t>(r.d_reds);
            if (o.sort == "queue") return r.d_queue;
            if (o.sort == "binary") return r.d_binary;
            return r.d_memory;  // memory, heap and stack: what the process holds
        };
        // Ties (most processes grow by nothing) go to the one that ran the most.
        std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
            return std::pair(growth(a), a.d_reds) > std::pair(growth(b), b.d_reds);
        });
        // A process that neither grew nor ran in the interval is not news: no rows of +0.
        std::erase_if(rows, [](const Row& r) {
            return !r.fresh && r.d_memory <= 0 && r.d_binary <= 0 && r.d_queue <= 0 && r.d_reds == 0;
        });
        if (!o.all && rows.size() > o.top) rows.resize(o.top);
        for (Row& r : rows) {
            Row named = make_row(c, *r.p);
            r.pid = named.pid, r.name = named.name, r.initial = named.initial, r.current = named.current;
        }
        if (o.json) {
            nlohmann::json j{{"interval_s", o.watch},
                             {"processes_total", table.processes.size()},
                             {"unreadable", table.unreadable},
                             {"schedulers", sched_json(busy)},
                             {"sched_sampler", wakeup_priority_name(util.sampler_priority())},
                             {"processes", nlohmann::json::array()}};
            for (const Row& r : rows) {
                auto p = row_json(r, proc_size);
                p["memory_growth"] = r.d_memory;
                p["binary_growth"] = r.d_binary;
                p["message_queue_growth"] = r.d_queue;
                p["reductions_in_interval"] = r.d_reds;
                p["new"] = r.fresh;
                j["processes"].push_back(p);
            }
            std::cout << json_text(j, -1) << std::endl;  // one line per interval
        } else {
            if (tty) fmt::print("\x1b[H\x1b[2J");
            fmt::print("beam-bpf-procs: {} processes of {} {}; growth in {} s, by {} (new*: all it holds)\n",
                       table.processes.size(), printable(c.vm.exe_name()), c.vm.pid(), o.watch, o.sort);
            if (!busy.empty())
                fmt::print("{}\n", fit("schedulers busy (spinning not counted): " + SchedUtil::line(busy), o.columns));
            if (!busy.empty() && !preempts_at_once(util.sampler_priority()))
                fmt::print("{}\n", fit(fmt::format("  (sampled at {} priority, real time being refused here: on CPUs "
                                                   "the busy schedulers fill these may read a few points low)",
                                                   wakeup_priority_name(util.sampler_priority())),
                                       o.columns));
            static const std::vector<Column> cols{
                {"PID", 14, false, true},   {"MEMORY", 9, true}, {"+MEMORY", 10}, {"BINARY", 9, true},
                {"+BINARY", 10, true},      {"MSGQ", 7, true},   {"+MSGQ", 7},    {"+REDS", 12},
                {"STATUS", 18, false, true}};
            // NAME as wide as it may be, whatever this refresh's names: the columns stay put.
            const Layout l = lay_out(cols, kNameWidthMax, o.columns);
            fmt::print("{}\n", table_line(cols, l, headings(cols), "NAME", "CURRENT"));
            for (const Row& r : rows) {
                const ProcessEntry& e = *r.p;
                fmt::print("{}\n", table_line(cols, l,
                                              {r.pid + (r.fresh ? "*" : ""), human_bytes(e.memory(proc_size)),
                                               signed_bytes(r.d_memory), human_bytes(e.binary_bytes),
                                               signed_bytes(r.d_binary), std::to_string(e.msgq_len),
                                               fmt::format("{:+}", r.d_queue), std::to_string(r.d_reds), e.status()},
                                              r.name, r.current));
            }
            if (rows.empty()) fmt::print("(no process grew or ran in the interval)\n");
            std::fflush(stdout);
        }
        prev.clear();
        for (const auto& e : table.processes) prev[e.pid] = e;
    }
    return 0;
}

namespace {

// The process `text` names: a pid (<0.85.0>) or a registered name. A running process's
// Process may not verify in one reading of the table (its heap pointers move), so a miss is
// read again a few times before it is believed.
ProcessEntry inspected_process(ProcsContext& c, const std::string& text) {
    const uint64_t want = find_process(c.vm, c.names, text, "--inspect");
    const uint64_t mask = c.vm.release().pids.mask();
    bool unreadable = false;  // in the table, but its Process did not read at the last try
    for (int attempt = 0; attempt < 10; attempt++) {
        if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const ProcessTable table = read_checked_table(c.vm);
        for (const ProcessEntry& e : table.processes)
            if ((e.pid & mask) == want) return e;
        unreadable = std::ranges::any_of(table.unreadable_pids, [&](uint64_t pid) { return (pid & mask) == want; });
    }
    if (unreadable)
        throw UserError(
            fmt::format("--inspect {}: its Process does not read right (heap pointers out of order or "
                        "implausible in each of 10 readings): not inspected",
                        text));
    throw UserError(fmt::format("--inspect {}: no such process", text));
}

// --syntax auto: Elixir's when the process is Elixir's, as its name shows (an alias, MyApp.Repo,
// or an Elixir function, MyApp.Server.init/1: names are written as their language writes them).
term::Syntax syntax_for(const std::string& wanted, const std::string& name) {
    if (wanted == "elixir") return term::Syntax::elixir;
    if (wanted == "erlang") return term::Syntax::erlang;
    return !name.empty() && std::isupper(static_cast<unsigned char>(name[0])) ? term::Syntax::elixir
                                                                              : term::Syntax::erlang;
}

}  // namespace

int procs_inspect(ProcsContext& c, const ProcsOptions& o) {
    ProcessEntry e = inspected_process(c, o.inspect);
    const term::Syntax syntax = syntax_for(o.syntax, make_row(c, e).name);
    const term::Limits limits{.max_chars = o.width ? o.width : SIZE_MAX / 4,
                              .depth = o.depth ? o.depth : -1,
                              .max_reads = 50'000'000,
                              .syntax = syntax};
    const term::Limits key_limits{.max_chars = 40, .depth = 4, .max_reads = 4096, .syntax = syntax};
    // A binary prints at most max_chars of its bytes: only those are copied.
    HeapSnapshot snap = snapshot_process(c.vm, e.c_p, e.pid, o.max_heap_mib << 20, c.names.term_source(),
                                         std::max(limits.max_chars, key_limits.max_chars));
    term::TermSource terms = snapshot_terms(c.vm, snap, c.names.term_source());
    const ProcessEntry& p = snap.proc;
    // Named as in the table: the copy's own RegProc is not followed, the table's reading is.
    ProcessEntry named = p;
    named.reg_name = e.reg_name;
    const Row row = make_row(c, named);
    std::vector<Root> roots = root_set(snap, row.current, [&](uint64_t cp) {
        std::string f = c.function(0, cp);
        return f.empty() ? fmt::format("{:#x}", cp) : printable(f);
    });
    // Each heap cell walked once over all roots (a term many roots share is sized once), within
    // a budget of reads and time.
    const RootSizes sizes = size_roots(snap, terms, roots);
    std::stable_sort(roots.begin(), roots.end(), [](const Root& a, const Root& b) {
        return (a.size ? a.size->words : 0) > (b.size ? b.size->words : 0);
    });
    struct Total {
        size_t terms = 0;
        uint64_t words = 0, off_heap_bytes = 0;
    } totals[3];
    for (const Root& r : roots) {
        Total& t = totals[static_cast<int>(r.kind)];
        t.terms++;
        if (r.size) t.words += r.size->words, t.off_heap_bytes += r.size->off_heap_bytes;
    }
    // Roots holding one term are one row; text only for the rows shown (JSON: every row, as
    // before).
    std::vector<Root> rows = fold_shared(std::move(roots));
    const size_t shown_rows = o.all || o.json ? rows.size() : std::min(rows.size(), o.top);
    auto key_text = [&](uint64_t key) {
        return printable(term::text(terms, key, key_limits).value_or(fmt::format("<bad term at {:#x}>", key & ~3ull)));
    };
    for (size_t i = 0; i < shown_rows; i++) {
        Root& r = rows[i];
        r.text = term::text(terms, r.term, limits);
        if (r.text) r.text = printable(*r.text);
        if (r.kind == Root::Kind::Dictionary) r.where = key_text(r.key);
        for (auto& sh : r.first_sharers)
            if (sh.kind == Root::Kind::Dictionary) sh.where = key_text(sh.key);
    }
    auto shown = [](const Root& r) { return r.text ? *r.text : fmt::format("<bad term at {:#x}>", r.term & ~3ull); };
    auto place = [](Root::Kind kind, const std::string& where, const std::string& function) {
        return fmt::format("{} {}{}{}", kind_name(kind), where, function.empty() ? "" : " ", function);
    };
    auto also = [&](const Root& r) {
        std::string s;
        for (const auto& sh : r.first_sharers) s += (s.empty() ? "" : ", ") + place(sh.kind, sh.where, sh.function);
        if (r.sharers > r.first_sharers.size()) s += fmt::format(", ... {} more", r.sharers - r.first_sharers.size());
        return s;
    };

    if (o.json) {
        nlohmann::json j = row_json(row, c.vm.offsets().proc_size);
        j["undecoded_messages"] = snap.undecoded_messages;
        j["attempts"] = snap.attempts;
        j["bytes_copied"] = snap.bytes_copied();
        // Words of the heap a pending collection left behind (copied too); 0 when there is none.
        j["abandoned_heap_size"] = p.abandoned_heap ? p.heap_sz : 0;
        if (!sizes.partial.empty()) j["partial"] = sizes.partial;
        j["roots"] = nlohmann::json::array();
        for (size_t i = 0; i < shown_rows; i++) {
            const Root& r = rows[i];
            nlohmann::json k{{"kind", kind_name(r.kind)},
                             {"where", r.where},
                             {"term", shown(r)},
                             {"decoded", r.text.has_value()}};
            if (!r.function.empty()) k["function"] = r.function;
            if (r.size) k["words"] = r.size->words, k["off_heap_bytes"] = r.size->off_heap_bytes;
            else k["words"] = nullptr;
            k["distinct_words"] = r.distinct_words;
            if (r.sharers) {
                k["same_term_roots"] = r.sharers;
                for (const auto& sh : r.first_sharers)
                    k["same_term_as"].push_back(place(sh.kind, sh.where, sh.function));
            }
            j["roots"].push_back(k);
        }
        for (int kind = 0; kind < 3; kind++)
            j["totals"][kind_name(static_cast<Root::Kind>(kind))] = {{"terms", totals[kind].terms},
                                                                     {"words", totals[kind].words},
                                                                     {"distinct_words", sizes.distinct_words[kind]},
                                                                     {"off_heap_bytes", totals[kind].off_heap_bytes}};
        std::cout << json_text(j, 1) << "\n";
        return 0;
    }
    fmt::print("beam-bpf-procs: {} {}, {} in {}\n", row.pid, row.name.empty() ? "(no name)" : row.name, p.status(),
               row.current.empty() ? "?" : row.current);
    fmt::print("{}\n",
               wrap_words(fmt::format("  heap {} words{}, old heap {}, heap fragments {}, stack {}; {} messages "
                                      "queued; copied {} at attempt {}",
                                      p.heap_sz, p.abandoned_heap ? " (abandoned until a pending collection)" : "",
                                      p.old_heap_sz, p.mbuf_sz, p.stack_sz, p.msgq_len,
                                      human_bytes(snap.bytes_copied()), snap.attempts),
                          o.columns));
    fmt::print("{:>10} {:>9}  {:<44} {}\n", "WORDS", "OFF-HEAP", "ROOT", "TERM");
    for (size_t i = 0; i < shown_rows; i++) {
        const Root& r = rows[i];
        fmt::print("{:>10} {:>9}  {:<44} {}\n", r.size ? std::to_string(r.size->words) : "?",
                   r.size && r.size->off_heap_bytes ? human_bytes(r.size->off_heap_bytes) : "-",
                   place(r.kind, r.where, r.function), shown(r));
        if (r.sharers) fmt::print("{:>22}  the same term held by {} more: {}\n", "", r.sharers, also(r));
    }
    if (shown_rows < rows.size()) fmt::print("  ... {} more (--all, or -t N)\n", rows.size() - shown_rows);
    std::string sums = "totals (flat sizes, shared terms counted per reference; distinct: each heap word once):";
    for (int kind = 0; kind < 3; kind++)
        sums += fmt::format("{} {} {} terms, {} words ({} distinct){}", kind ? ";" : "",
                            kind_name(static_cast<Root::Kind>(kind)), totals[kind].terms, totals[kind].words,
                            sizes.distinct_words[kind],
                            totals[kind].off_heap_bytes
                                ? fmt::format(" + {} off heap", human_bytes(totals[kind].off_heap_bytes))
                                : "");
    fmt::print("{}\n", wrap_words(sums, o.columns));
    if (snap.undecoded_messages)
        fmt::print("  {} distribution messages not yet decoded (no term to show)\n", snap.undecoded_messages);
    if (!sizes.partial.empty()) fmt::print(stderr, "beam-bpf-procs: partial: {}\n", sizes.partial);
    return 0;
}

}  // namespace bb
