#include "native/function_search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string_view>

#include "target/proc_maps.hpp"

namespace bb {

namespace {

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

}  // namespace

std::vector<NativeMatch> resolve_functions(const Vm& vm, const std::string& func, bool exact) {
    auto matches = [&](const std::string& name) { return exact ? name == func : name.rfind(func, 0) == 0; };
    std::vector<NativeMatch> found;
    std::vector<std::string> all;
    for (const auto& f : vm.mapped_files()) {
        std::optional<ElfFile> elf;
        uint64_t bias;
        if (f.path == vm.exe()) {
            bias = vm.load_bias();
        } else {
            try {
                elf.emplace(root_path(vm.pid(), f.path));
            } catch (const std::exception&) {
                continue;  // not ELF (a data file mapped from offset 0)
            }
            bias = f.start - elf->first_load_vaddr();
        }
        const ElfFile& e = elf ? *elf : vm.elf();
        for (const auto& s : e.symbols()) {
            if (!s.is_func || s.size == 0) continue;
            if (matches(s.name))
                found.push_back({s, f.path, s.value + bias});
            else if (found.empty())
                all.push_back(s.name);
        }
        if (!found.empty()) break;  // the first file that has FUNC is the one meant
    }
    if (found.empty()) {
        std::sort(all.begin(), all.end());
        all.erase(std::unique(all.begin(), all.end()), all.end());
        std::stable_sort(all.begin(), all.end(), [&](const std::string& a, const std::string& b) {
            return edit_distance(func, a) < edit_distance(func, b);
        });
        std::string near;
        for (size_t i = 0; i < all.size() && i < 5; i++) near += (i ? ", " : "") + all[i];
        throw UserError(fmt::format("no function {}{} in {} or its libraries; closest: {}", func,
                                    exact ? "" : "*", vm.exe(), near));
    }
    std::sort(found.begin(), found.end(), [](const NativeMatch& a, const NativeMatch& b) { return a.sym.name < b.sym.name; });
    return found;
}

}  // namespace bb
