#include "base/closest.hpp"

#include <algorithm>

namespace bb {

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) row[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); j++) {
            size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
            diag = up;
        }
    }
    return row[b.size()];
}

std::vector<std::string> closest(std::string_view typed, std::vector<std::string> names, size_t n) {
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    // Each distance once: a VM's symbol table has tens of thousands of names.
    std::vector<std::pair<size_t, std::string*>> by_distance;
    by_distance.reserve(names.size());
    for (auto& name : names) by_distance.emplace_back(edit_distance(typed, name), &name);
    std::stable_sort(by_distance.begin(), by_distance.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> out;
    for (size_t i = 0; i < by_distance.size() && i < n; i++) out.push_back(std::move(*by_distance[i].second));
    return out;
}

std::string join(const std::vector<std::string>& items, std::string_view sep, std::string_view last) {
    std::string out;
    for (size_t i = 0; i < items.size(); i++) {
        if (i > 0) out += i + 1 == items.size() && !last.empty() ? last : sep;
        out += items[i];
    }
    return out;
}

std::string slip_of(std::string_view typed, std::vector<std::string> names) {
    auto near = closest(typed, std::move(names), 1);
    if (near.empty() || edit_distance(typed, near[0]) > std::max<size_t>(2, typed.size() / 4)) return "";
    return near[0];
}

}  // namespace bb
