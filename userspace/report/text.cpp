#include "report/text.hpp"

#include "base/text.hpp"
#include "report/report.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace bb {

namespace {

constexpr size_t kCalleeRows = 10;  // -e wall's table of called processes: the busiest funnels

// The frame a sample's self time goes to when Erlang comes first: its innermost Erlang function
// (the C it called, a BIF, a NIF, the collector, is that function's doing), else its innermost
// pseudo frame ([gc], [no Erlang process]), else its innermost other VM frame (JIT shared code,
// a process root), else its leaf. The scheduler's loop in JIT shared code
// (`[no Erlang process];global::process_main;erts_schedule;...`) is not a function a user wrote:
// ranked as one, it was the top row on RabbitMQ and the Elixir app (26 and 32%).
uint32_t charged_location(const Profile& p, const Sample& s) {
    // 0 an Erlang function, 1 a pseudo frame, 2 another VM frame, 3 the rest: the innermost of
    // the lowest rank is charged.
    auto rank = [&](uint32_t l) {
        const Function& f = p.functions[p.locations[l].function];
        if (f.kind == FrameKind::erlang) return 0;
        if (f.kind != FrameKind::vm) return 3;
        return f.name.starts_with('[') ? 1 : 2;
    };
    uint32_t best = s.stack.back();
    for (auto it = s.stack.rbegin(); it != s.stack.rend(); ++it)
        if (rank(*it) < rank(best)) best = *it;
    return best;
}

// -e wall: whether a sample is an idle process's (its leaf says so: wall_profile.cpp's).
bool idle_sample(const Profile& p, const Sample& s) {
    const std::string& leaf = p.functions[p.locations[s.stack.back()].function].name;
    return leaf == kIdleReceiveLeaf || leaf == kHibernatedLeaf;
}

// --by-process: the processes' root frames, by their share of the samples (not idle ones', with
// hide_idle).
void write_processes(const Profile& p, std::ostream& out, const TopOptions& o, double all) {
    std::map<std::string, uint64_t> by_root;
    for (const Sample& s : p.samples)
        if (const Function& f = p.functions[p.locations[s.stack.front()].function];
            f.mapping == "[process]" && !(o.hide_idle && idle_sample(p, s)))
            by_root[f.name] += s.count;
    if (by_root.empty()) return;
    std::vector<std::pair<uint64_t, std::string>> processes;
    for (const auto& [label, n] : by_root) processes.emplace_back(n, label);
    std::sort(processes.begin(), processes.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    if (o.rows && processes.size() > o.rows) processes.resize(o.rows);
    fmt::print(out, "\n{}\n",
               fit(fmt::format("{:>6}  {}", "TOTAL%",
                               "PROCESSES (--by-process: one row per name; --by-pid: per process)"),
                   o.columns));
    for (const auto& [n, label] : processes)
        fmt::print(out, "{}\n", fit(fmt::format("{:6.1f}  {}", 100.0 * n / all, label), o.columns));
}

// Where a wall profile's sample is: (its state, the function its process is in and its caller,
// what it waits on). Its stack is [process root;] [state]; frames...; [what it waits on].
struct Place {
    std::string state, where, waits;
    auto operator<=>(const Place&) const = default;
};

std::optional<Place> place_of(const Profile& p, const Sample& s) {
    auto it = s.stack.begin();
    while (it != s.stack.end() && p.functions[p.locations[*it].function].mapping == "[process]") ++it;
    if (it == s.stack.end()) return std::nullopt;
    Place place{p.label(*it), "", ""};
    std::vector<std::string> erlang;
    for (++it; it != s.stack.end(); ++it) {
        const Function& f = p.functions[p.locations[*it].function];
        if (f.kind == FrameKind::erlang) erlang.push_back(p.label(*it));
        else if (std::next(it) == s.stack.end()) place.waits = p.label(*it);  // the leaf: what it waits on
    }
    if (!erlang.empty()) place.where = erlang.back();
    if (erlang.size() >= 2) place.where += " < " + erlang[erlang.size() - 2];
    return place;
}

std::string place_text(const Place& pl) {
    return pl.state + (pl.where.empty() ? "" : " " + pl.where) + (pl.waits.empty() ? "" : " " + pl.waits);
}

// The callee a "[waiting for my_server, pid 0.90.0]" leaf names (wall_profile.cpp writes it),
// as "my_server, pid 0.90.0", and its pid as samples carry it ("<0.90.0>"); nullopt for any
// other leaf, and for "[waiting for ?]".
std::optional<std::pair<std::string, std::string>> callee_of(const std::string& waits) {
    constexpr std::string_view kWaiting = "[waiting for ";
    const size_t at = waits.rfind("pid ");
    if (!waits.starts_with(kWaiting) || !waits.ends_with(']') || at == std::string::npos || at < kWaiting.size())
        return std::nullopt;
    return std::pair(waits.substr(kWaiting.size(), waits.size() - 1 - kWaiting.size()),
                     "<" + waits.substr(at + 4, waits.size() - 1 - (at + 4)) + ">");
}

// A wall profile's table (-e wall): where process time goes, as places, biggest first, under a
// line of the states' shares.
void write_wall_top(const Profile& p, std::ostream& out, const TopOptions& o, double all) {
    std::map<Place, uint64_t> places;
    std::map<std::string, uint64_t> states;
    for (const Sample& s : p.samples) {
        if (o.hide_idle && idle_sample(p, s)) continue;
        std::optional<Place> place = place_of(p, s);
        if (!place) continue;
        states[place->state] += s.count;
        places[*place] += s.count;
    }
    std::vector<std::pair<uint64_t, std::string>> state_shares;
    for (const auto& [state, n] : states) state_shares.emplace_back(n, state);
    std::sort(state_shares.rbegin(), state_shares.rend());
    std::string line;
    for (const auto& [n, state] : state_shares) line += fmt::format("  {} {:.1f}%", state, 100.0 * n / all);
    fmt::print(out, "STATES{}\n\n", line);
    std::vector<std::pair<uint64_t, const Place*>> rows;
    for (const auto& [place, n] : places) rows.emplace_back(n, &place);
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : *a.second < *b.second;
    });
    if (o.rows && rows.size() > o.rows) rows.resize(o.rows);
    size_t width = 0;
    for (const auto& [n, place] : rows) width = std::max(width, place->where.size());
    width = std::min<size_t>(width, 72);
    fmt::print(out, "{}\n",
               fit(fmt::format("{:>6}  {:<20} {:<{}}  {}", "SHARE%", "STATE", "FUNCTION < CALLER", width, "WAITING ON"),
                   o.columns));
    for (const auto& [n, place] : rows) {
        std::string row = fmt::format("{:6.1f}  {:<20} {:<{}}  {}", 100.0 * n / all, place->state, place->where, width,
                                      place->waits);
        row.erase(row.find_last_not_of(' ') + 1);
        fmt::print(out, "{}\n", fit(row, o.columns));
    }
}

// -e wall: the processes others wait for in a call, by how many wait for each (its waiters'
// process time over the profile's: the mean number waiting), with the share of its own time it
// was running or runnable, and where it spent most of it (idle or not: a pool idle while
// hundreds wait for it is not the bottleneck). A funnel is a callee with many
// waiters: running all the time, it is the bottleneck; waiting itself, its place says on what.
void write_callees(const Profile& p, std::ostream& out, const TopOptions& o) {
    struct Callee {
        std::string text;
        uint64_t waiters = 0, own = 0, running = 0;
        std::map<Place, uint64_t> places;
    };
    std::map<std::string, Callee> callees;  // pid ("<0.90.0>") -> what it does
    std::vector<std::optional<Place>> place(p.samples.size());
    for (size_t k = 0; k < p.samples.size(); k++) {
        place[k] = place_of(p, p.samples[k]);
        if (!place[k]) continue;
        if (auto callee = callee_of(place[k]->waits)) {
            Callee& c = callees[callee->second];
            c.text = callee->first;
            c.waiters += p.samples[k].count;
        }
    }
    if (callees.empty() || p.duration_ns == 0) return;
    for (size_t k = 0; k < p.samples.size(); k++) {
        auto it = callees.find(p.samples[k].pid);
        if (it == callees.end() || !place[k]) continue;
        Callee& c = it->second;
        c.own += p.samples[k].count;
        c.running += place[k]->state == "[running]" || place[k]->state == "[runnable]" ? p.samples[k].count : 0;
        c.places[*place[k]] += p.samples[k].count;
    }
    std::vector<const Callee*> rows;
    for (const auto& [pid, c] : callees) rows.push_back(&c);
    std::sort(rows.begin(), rows.end(), [](const Callee* a, const Callee* b) {
        return a->waiters != b->waiters ? a->waiters > b->waiters : a->text < b->text;
    });
    if (rows.size() > kCalleeRows) rows.resize(kCalleeRows);
    constexpr std::string_view kHeading = "CALLED PROCESS";
    size_t width = kHeading.size();
    for (const Callee* c : rows) width = std::max(width, c->text.size());
    width = std::min<size_t>(width, 48);
    // The share first, the place after it: cut to a terminal's width, the place's end goes.
    fmt::print(out, "\n{}\n",
               fit(fmt::format("{:>7}  {:>4}  {:<{}}  {:>5}  {}", "WAITERS", "RUN%", kHeading, width, "MOST%",
                               "WHERE IT SPENDS MOST OF ITS OWN TIME"),
                   o.columns));
    for (const Callee* c : rows) {
        const double waiters = static_cast<double>(c->waiters) / static_cast<double>(p.duration_ns);
        std::string row;
        if (c->own == 0) {
            row = fmt::format("{:7.1f}  {:>4}  {:<{}}  {:>5}  (not sampled)", waiters, "-", c->text, width, "-");
        } else {
            auto most = std::max_element(c->places.begin(), c->places.end(),
                                         [](const auto& a, const auto& b) { return a.second < b.second; });
            row = fmt::format("{:7.1f}  {:4.0f}  {:<{}}  {:5.0f}  {}", waiters, 100.0 * c->running / c->own, c->text,
                              width, 100.0 * most->second / c->own, place_text(most->first));
        }
        fmt::print(out, "{}\n", fit(row, o.columns));
    }
}

}  // namespace

std::vector<TopRow> top_rows(const Profile& p, size_t n, bool by_total, bool erlang_first) {
    // One row per label: locations of one function merge unless --lines tells them apart.
    std::vector<TopRow> rows;
    std::vector<uint32_t> row_of(p.locations.size());
    std::unordered_map<std::string, uint32_t> by_label;
    for (uint32_t l = 0; l < p.locations.size(); l++) {
        std::string label = p.label(l);
        auto [it, added] = by_label.try_emplace(label, static_cast<uint32_t>(rows.size()));
        if (added) rows.push_back(TopRow{label, p.functions[p.locations[l].function].kind});
        row_of[l] = it->second;
    }
    std::unordered_set<uint32_t> seen;
    for (const Sample& s : p.samples) {
        rows[row_of[erlang_first ? charged_location(p, s) : s.stack.back()]].self += s.count;
        seen.clear();
        for (uint32_t l : s.stack)
            if (seen.insert(row_of[l]).second) rows[row_of[l]].total += s.count;  // recursion counts once
    }
    std::erase_if(rows, [](const TopRow& r) { return r.total == 0; });
    auto key = [by_total](const TopRow& x) {
        return by_total ? std::pair(x.total, x.self) : std::pair(x.self, x.total);
    };
    std::sort(rows.begin(), rows.end(), [&](const TopRow& a, const TopRow& b) {
        if (key(a) != key(b)) return key(a) > key(b);
        return a.label < b.label;
    });
    if (n && rows.size() > n) rows.resize(n);
    return rows;
}

void write_top(const Profile& p, std::ostream& out, const TopOptions& o) {
    uint64_t total = p.total();
    double all = total ? static_cast<double>(total) : 1.0;
    if (p.kind().process_time) {
        // Shares of the time not idle, where the idle is left out of the table.
        uint64_t idle = 0;
        for (const Sample& s : p.samples) idle += o.hide_idle && idle_sample(p, s) ? s.count : 0;
        const double shown = total > idle ? static_cast<double>(total - idle) : 1.0;
        write_wall_top(p, out, o, shown);
        write_callees(p, out, o);
        return write_processes(p, out, o, shown);
    }
    const bool erlang_first = !o.flat;
    auto rows = top_rows(p, 0, o.by_total, erlang_first);
    auto native = [](const TopRow& r) { return r.kind == FrameKind::native || r.kind == FrameKind::kernel; };
    std::vector<TopRow> natives;
    if (erlang_first && !o.erlang_only) {
        // The C and kernel code by its own time, for the section below.
        for (TopRow& r : top_rows(p, 0, false, false))
            if (native(r) && r.self) natives.push_back(r);
        if (natives.size() > kNativeRows) natives.resize(kNativeRows);
    }
    if (o.erlang_only) std::erase_if(rows, [](const TopRow& r) { return r.kind != FrameKind::erlang; });
    else if (erlang_first) std::erase_if(rows, [&](const TopRow& r) { return native(r) && !r.self; });
    if (o.rows && rows.size() > o.rows) rows.resize(o.rows);
    fmt::print(out, "{:>6}  {:>6}  {}\n", "SELF%", "TOTAL%", "FUNCTION");
    // A row past a terminal's width is cut at its end (its label: an Elixir name, a long
    // process name), never wrapped into the next.
    auto row = [&](const TopRow& r) {
        fmt::print(out, "{}\n",
                   fit(fmt::format("{:6.1f}  {:6.1f}  {}", 100.0 * r.self / all, 100.0 * r.total / all, r.label),
                       o.columns));
    };
    for (const auto& r : rows) row(r);
    if (!natives.empty()) {
        fmt::print(out, "\n{:>6}  {:>6}  {}\n", "SELF%", "TOTAL%",
                   "NATIVE CODE (part of the Erlang SELF% above; --flat ranks it with them)");
        for (const auto& r : natives) row(r);
    }
    write_processes(p, out, o, all);
}

void write_folded(const Profile& p, std::ostream& out) {
    std::vector<std::string> labels(p.locations.size());
    for (uint32_t l = 0; l < labels.size(); l++) labels[l] = p.label(l);
    // Samples of different processes, or locations that differ only by line, fold together.
    std::map<std::string, uint64_t> lines;
    for (const Sample& s : p.samples) {
        std::string text;
        for (size_t i = 0; i < s.stack.size(); i++) {
            if (i) text += ';';
            text += labels[s.stack[i]];
        }
        lines[text] += s.count;
    }
    for (const auto& [text, count] : lines) fmt::print(out, "{} {}\n", text, count);
}

}  // namespace bb
