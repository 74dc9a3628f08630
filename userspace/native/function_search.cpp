#include "native/function_search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string_view>

#include <sys/sysmacros.h>

#include "base/closest.hpp"
#include "target/proc_maps.hpp"
#include "target/target_file.hpp"

namespace bb {

std::vector<NativeMatch> resolve_functions(const Vm& vm, const std::string& func, bool exact) {
    auto matches = [&](const std::string& name) { return exact ? name == func : name.rfind(func, 0) == 0; };
    std::vector<NativeMatch> found;
    std::vector<std::string> all;
    for (const auto& m : vm.mapped_files()) {
        std::shared_ptr<const TargetFile> file;
        std::optional<ElfFile> elf;
        uint64_t bias;
        if (m.inode == vm.exe_file().inode && makedev(m.dev_major, m.dev_minor) == vm.exe_file().dev) {
            bias = vm.load_bias();
        } else {
            // The inode the mapping maps (target/target_file.hpp), kept open for a probe on it.
            auto opened = open_mapped_file(vm.pid(), m);
            if (!opened) continue;
            file = std::make_shared<const TargetFile>(std::move(*opened));
            auto read = ElfFile::open(file->fd.get(), file->name);
            if (!read) continue;  // not ELF (a data file mapped from offset 0)
            elf.emplace(std::move(*read));
            bias = m.start - elf->first_load_vaddr();
        }
        const ElfFile& e = elf ? *elf : vm.elf();
        const std::string name = file ? file->name : vm.exe();
        for (const auto& s : e.symbols()) {
            if (!s.is_func || s.size == 0) continue;
            if (matches(s.name)) found.push_back({s, name, s.value + bias, file});
            else if (found.empty()) all.push_back(s.name);
        }
        if (!found.empty()) break;  // the first file that has FUNC is the one meant
    }
    if (found.empty()) {
        const std::string near = join(closest(func, std::move(all), 5));
        if (auto why = vm.missing_local_symbols(); !why.empty())
            throw UserError(
                fmt::format("no function {}{} in {} or its libraries: {}", func, exact ? "" : "*", vm.exe(), why));
        throw UserError(fmt::format("no function {}{} in {} or its libraries; closest: {}", func, exact ? "" : "*",
                                    vm.exe(), near));
    }
    std::sort(found.begin(), found.end(),
              [](const NativeMatch& a, const NativeMatch& b) { return a.sym.name < b.sym.name; });
    return found;
}

}  // namespace bb
