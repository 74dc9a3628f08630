// beam-bpf-procs --ets: every ETS table of the node, biggest first, with what ets:info/2 says of
// it (id, name, type, protection, owner, size, memory, concurrency), read from outside: the
// tables are not locked, ets:i() is not run. With --watch, what each table gained per interval.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "inspect/ets_tables.hpp"
#include "inspect/procs_report.hpp"

namespace bb {

namespace {

// ets:info(T, memory): the table's bytes in words, rounded up.
uint64_t words(int64_t bytes) { return (uint64_t(bytes) + 7) / 8; }

// A read of the tables, with the text of each one's id, name and owner.
struct Reading {
    EtsTables read;
    double read_ms = 0;
    std::unordered_map<uint64_t, std::string> owners;  // pid term -> "<0.85.0> name"
    std::unordered_map<uint64_t, std::string> names;   // atom term -> its text, printable

    // ets:info(T, id): the table's reference, as ~p prints it.
    static std::string ref(const EtsTable& t) {
        return fmt::format("#Ref<0.{}.{}.{}>", t.refn[2], t.refn[1], t.refn[0]);
    }
    // What names it in a call: its name if it is a named_table, else its reference.
    std::string id(const EtsTable& t) const { return t.named() ? name(t) : ref(t); }
    const std::string& name(const EtsTable& t) const { return names.at(t.name); }
    std::string concurrency(const EtsTable& t) const {
        std::string w = t.write_concurrency();
        return fmt::format("{}{}", t.read_concurrency() ? "read" : "",
                           w == "false"
                               ? ""
                               : (t.read_concurrency() ? "," : "") + std::string(w == "auto" ? "write:auto" : "write"));
    }
};

Reading read_tables(ProcsContext& c) {
    Reading r;
    const uint64_t t0 = monotonic_ns();
    r.read = read_ets_tables(c.vm);
    r.read_ms = (monotonic_ns() - t0) / 1e6;
    const uint64_t atoms = c.vm.symbol_address("erts_atom_table");
    for (const EtsTable& t : r.read.tables)
        if (!r.names.count(t.name)) {
            auto text = read_atom_text(c.vm.mem(), c.vm.offsets(), c.vm.release(), atoms, t.name);
            r.names[t.name] = text ? printable(*text) : "?";
        }
    // Owners are named as the process table names them (registered name, label, initial call).
    const ProcessTable table = read_checked_table(c.vm);
    std::unordered_map<uint64_t, const ProcessEntry*> by_pid;
    for (const ProcessEntry& e : table.processes) by_pid[e.pid] = &e;
    for (const EtsTable& t : r.read.tables) {
        auto it = by_pid.find(t.owner);
        std::string name = it == by_pid.end() ? ""
                                              : printable(c.names.name(t.owner, it->second->c_p, it->second->reg_name,
                                                                       it->second->initial));
        r.owners[t.owner] = c.vm.format_pid(t.owner) + (name.empty() ? "" : " " + name);
    }
    return r;
}

nlohmann::json table_json(ProcsContext& c, const Reading& r, const EtsTable& t) {
    const std::string& owner = r.owners.at(t.owner);
    const std::string pid = c.vm.format_pid(t.owner);
    return {{"id", r.id(t)},
            {"ref", Reading::ref(t)},
            {"name", r.name(t)},
            {"named_table", t.named()},
            {"type", t.type()},
            {"protection", t.protection()},
            {"owner", pid},
            {"owner_name", owner.size() > pid.size() ? owner.substr(pid.size() + 1) : ""},
            {"size", t.objects},
            {"memory_bytes", t.bytes},
            {"memory_words", words(t.bytes)},
            {"read_concurrency", t.read_concurrency()},
            {"write_concurrency", t.write_concurrency()},
            {"decentralized_counters", t.decentralized},
            {"address", t.address}};
}

void print_notes(const Reading& r) {
    if (r.read.changed)
        fmt::print(
            "beam-bpf-procs: {} lists of tables changed while read (tables created or deleted): some may be "
            "missing\n",
            r.read.changed);
    if (r.read.snapshotting)
        fmt::print("beam-bpf-procs: {} tables were being counted by ets:info/2 while read: their counts are low\n",
                   r.read.snapshotting);
}

constexpr const char* kHeader = "{:<{}} {:<20} {:<13} {:<9} {:>10} {:>10} {:>11}  {}\n";

// The TABLE column's width: the longest id shown (a reference is up to 40 characters).
template <class Rows, class Table>
size_t id_width(const Reading& r, const Rows& rows, Table table) {
    size_t w = 5;
    for (const auto& row : rows) w = std::max(w, r.id(*table(row)).size() + 1);
    return w;
}

int ets_snapshot(ProcsContext& c, const ProcsOptions& o) {
    const Reading r = read_tables(c);
    std::vector<const EtsTable*> order;
    int64_t total = 0;
    for (const EtsTable& t : r.read.tables) order.push_back(&t), total += t.bytes;
    std::ranges::sort(order, [](auto* a, auto* b) {
        return std::pair(a->bytes, a->address) > std::pair(b->bytes, b->address);
    });
    const size_t shown = o.all ? order.size() : std::min(order.size(), o.top);
    if (o.json) {
        nlohmann::json j{{"vm_pid", c.vm.pid()},
                         {"otp_release", c.vm.release().major},
                         {"read_ms", r.read_ms},
                         {"tables_total", order.size()},
                         {"memory_bytes_total", total},
                         {"lists_changed", r.read.changed},
                         {"snapshotting", r.read.snapshotting},
                         {"tables", nlohmann::json::array()}};
        for (size_t i = 0; i < shown; i++) j["tables"].push_back(table_json(c, r, *order[i]));
        std::cout << json_text(j, 1) << "\n";
        return 0;
    }
    fmt::print("beam-bpf-procs: {} ETS tables, {} in all, of {} {}; read in {:.1f} ms\n", order.size(),
               human_bytes(uint64_t(total)), printable(c.vm.exe_name()), c.vm.pid(), r.read_ms);
    print_notes(r);
    const size_t iw = id_width(r, std::span(order.data(), shown), [](const EtsTable* t) { return t; });
    fmt::print(kHeader, "TABLE", iw, "NAME", "TYPE", "ACCESS", "OBJECTS", "MEMORY", "CONCURRENCY", "OWNER");
    for (size_t i = 0; i < shown; i++) {
        const EtsTable& t = *order[i];
        fmt::print(kHeader, r.id(t), iw, t.named() ? "" : r.name(t), t.type(), t.protection(), t.objects,
                   human_bytes(uint64_t(t.bytes)), r.concurrency(t), r.owners.at(t.owner));
    }
    if (shown < order.size()) fmt::print("({} smaller tables not shown: --all, or -t N)\n", order.size() - shown);
    return 0;
}

int ets_watch(ProcsContext& c, const ProcsOptions& o) {
    const bool tty = isatty(STDOUT_FILENO);
    std::unordered_map<uint64_t, EtsTable> prev;
    for (const EtsTable& t : read_ets_tables(c.vm).tables) prev[t.address] = t;
    for (size_t n = 0; o.count == 0 || n < o.count; n++) {
        std::this_thread::sleep_for(std::chrono::duration<double>(o.watch));
        std::optional<Reading> read;
        try {
            if (c.vm.alive()) read = read_tables(c);
        } catch (const UserError&) {
            if (c.vm.alive()) throw;
        }
        if (!read) {
            fmt::print(stderr, "beam-bpf-procs: the VM (pid {}) exited after {} intervals\n", c.vm.pid(), n);
            return 0;
        }
        const Reading& r = *read;
        struct Row {
            const EtsTable* t;
            int64_t d_bytes, d_objects;
            bool fresh;
        };
        std::vector<Row> rows;
        size_t deleted = prev.size();
        for (const EtsTable& t : r.read.tables) {
            auto it = prev.find(t.address);
            // A table at the address of one deleted in the interval is new (its id differs).
            const bool fresh = it == prev.end() || it->second.refn != t.refn;
            if (!fresh) deleted--;
            rows.push_back({&t, fresh ? t.bytes : t.bytes - it->second.bytes,
                            fresh ? t.objects : t.objects - it->second.objects, fresh});
        }
        std::ranges::stable_sort(rows, [](const Row& a, const Row& b) { return a.d_bytes > b.d_bytes; });
        std::erase_if(rows, [](const Row& w) { return !w.fresh && w.d_bytes == 0 && w.d_objects == 0; });
        if (!o.all && rows.size() > o.top) rows.resize(o.top);
        if (o.json) {
            nlohmann::json j{{"interval_s", o.watch},
                             {"tables_total", r.read.tables.size()},
                             {"tables_deleted", deleted},
                             {"lists_changed", r.read.changed},
                             {"tables", nlohmann::json::array()}};
            for (const Row& w : rows) {
                auto t = table_json(c, r, *w.t);
                t["memory_growth"] = w.d_bytes;
                t["size_growth"] = w.d_objects;
                t["new"] = w.fresh;
                j["tables"].push_back(t);
            }
            std::cout << json_text(j, -1) << std::endl;  // one line per interval
        } else {
            if (tty) fmt::print("\x1b[H\x1b[2J");
            fmt::print(
                "beam-bpf-procs: {} ETS tables of {} {}, growth in the last {} s by memory (new tables: all they "
                "hold; {} deleted)\n",
                r.read.tables.size(), printable(c.vm.exe_name()), c.vm.pid(), o.watch, deleted);
            print_notes(r);
            const size_t iw = id_width(r, rows, [](const Row& w) { return w.t; });
            fmt::print("{:<{}} {:<13} {:>10} {:>10} {:>10} {:>11}  {}\n", "TABLE", iw, "TYPE", "OBJECTS", "+OBJECTS",
                       "MEMORY", "+MEMORY", "OWNER");
            for (const Row& w : rows)
                fmt::print("{:<{}} {:<13} {:>10} {:>+10} {:>10} {:>11}  {}\n", r.id(*w.t) + (w.fresh ? "*" : ""), iw,
                           w.t->type(), w.t->objects, w.d_objects, human_bytes(uint64_t(w.t->bytes)),
                           signed_bytes(w.d_bytes), r.owners.at(w.t->owner));
            if (rows.empty()) fmt::print("(no table grew or changed in the interval)\n");
            std::fflush(stdout);
        }
        prev.clear();
        for (const EtsTable& t : r.read.tables) prev[t.address] = t;
    }
    return 0;
}

}  // namespace

int procs_ets(ProcsContext& c, const ProcsOptions& o) { return o.watch > 0 ? ets_watch(c, o) : ets_snapshot(c, o); }

}  // namespace bb
