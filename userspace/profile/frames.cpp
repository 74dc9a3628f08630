#include "profile/frames.hpp"

#include <cxxabi.h>

#include <cctype>
#include <cstdlib>
#include <memory>
#include <optional>

namespace bb {

namespace {

// One atom as the VM prints it: bare, or quoted with backslash escapes. Advances `s`.
std::optional<std::string> take_atom(std::string_view& s) {
    std::string out;
    if (s.empty()) return std::nullopt;
    if (s[0] != '\'') {
        size_t end = s.find_first_of(":/");
        if (end == 0) return std::nullopt;
        out = s.substr(0, end);
        s.remove_prefix(end == std::string_view::npos ? s.size() : end);
        return out;
    }
    for (size_t i = 1; i < s.size(); i++) {
        if (s[i] == '\\' && i + 1 < s.size()) {
            out += s[++i];
        } else if (s[i] == '\'') {
            s.remove_prefix(i + 1);
            return out;
        } else {
            out += s[i];
        }
    }
    return std::nullopt;  // unterminated
}

struct Mfa {
    std::string module, function, arity;
};

std::optional<Mfa> parse_mfa(std::string_view s) {
    Mfa m;
    auto mod = take_atom(s);
    if (!mod || s.empty() || s[0] != ':') return std::nullopt;
    s.remove_prefix(1);
    auto fun = take_atom(s);
    if (!fun || s.size() < 2 || s[0] != '/') return std::nullopt;
    s.remove_prefix(1);
    for (char c : s)
        if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    return Mfa{*mod, *fun, std::string(s)};
}

}  // namespace

std::string display_name(std::string_view vm_name) {
    constexpr std::string_view kElixir = "Elixir.", kPrologue = "-CodeInfoPrologue";
    // The JIT's pseudo-ranges: a module's code header, "M::codeHeader" (M as the JIT writes it,
    // unquoted), and a function's "M:f/A-CodeInfoPrologue": the module named as Elixir names it.
    if (size_t colons = vm_name.find("::"); colons != std::string_view::npos) {
        std::string_view mod = vm_name.substr(0, colons);
        if (mod.size() >= 2 && mod.front() == '\'' && mod.back() == '\'') mod = mod.substr(1, mod.size() - 2);
        if (mod.starts_with(kElixir) && mod.size() > kElixir.size())
            return std::string(mod.substr(kElixir.size())) + std::string(vm_name.substr(colons));
        return std::string(vm_name);
    }
    if (vm_name.ends_with(kPrologue) && vm_name.size() > kPrologue.size())
        return display_name(vm_name.substr(0, vm_name.size() - kPrologue.size())) + std::string(kPrologue);
    auto m = parse_mfa(vm_name);
    if (!m || !m->module.starts_with(kElixir)) return std::string(vm_name);
    std::string mod = m->module.substr(kElixir.size());
    // The compiler names a fun "-outer/N-fun-K-"; Elixir's own stack traces say
    // "anonymous fn/A in Mod.outer/N".
    const std::string& f = m->function;
    if (f.size() > 2 && f[0] == '-' && f.back() == '-') {
        if (size_t tag = f.find("-fun-"); tag != std::string::npos && tag > 1)
            return "anonymous fn/" + m->arity + " in " + mod + "." + f.substr(1, tag - 1);
    }
    return mod + "." + f + "/" + m->arity;
}

std::string short_demangled(const std::string& symbol) {
    if (!symbol.starts_with("_Z")) return symbol;
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> d(abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status),
                                                  &std::free);
    if (!d || status != 0) return symbol;
    std::string out = d.get();
    // Drop the parameter list: the last balanced "(...)", and a " const" after it.
    size_t end = out.size();
    if (out.ends_with(" const")) end -= 6;
    if (end == 0 || out[end - 1] != ')') return out;
    int depth = 0;
    for (size_t i = end; i-- > 0;) {
        if (out[i] == ')') depth++;
        else if (out[i] == '(' && --depth == 0) return i ? out.substr(0, i) : out;
    }
    return out;
}

uint32_t FrameTable::add(Function f, uint32_t line) {
    std::string key;
    key += static_cast<char>(f.kind);
    key += f.system_name;
    key += '\0';
    key += f.mapping;
    auto [fit, added] = function_ids_.try_emplace(std::move(key), static_cast<uint32_t>(functions_.size()));
    if (added) functions_.push_back(std::move(f));
    uint32_t function = fit->second;
    auto [lit, ladded] = location_ids_.try_emplace(uint64_t{function} << 32 | line,
                                                   static_cast<uint32_t>(locations_.size()));
    if (ladded) locations_.push_back(Location{function, line});
    return lit->second;
}

uint32_t FrameTable::erlang(const std::string& vm_name, const std::string& module, const std::string* file,
                            uint32_t start_line, uint32_t line) {
    Function f;
    // The JIT's shared code ("global::i_test_yield_shared") and module headers
    // ("lists::codeHeader") are JIT code, but not Erlang functions.
    bool real = vm_name.find("::") == std::string::npos;
    f.kind = real ? FrameKind::erlang : FrameKind::vm;
    // Module headers are named as their module is ("Enum::codeHeader"); display_name() leaves
    // the shared code's "global::" as it is.
    f.name = raw_names_ ? vm_name : display_name(vm_name);
    f.system_name = vm_name;
    if (file) f.file = *file;
    f.start_line = start_line;
    f.mapping = "[JIT] " + module;
    return add(std::move(f), file ? line : 0);
}

uint32_t FrameTable::other(FrameKind kind, const std::string& name, const std::string& mapping) {
    Function f;
    f.kind = kind;
    f.name = short_demangled(name);
    f.system_name = name;
    f.mapping = mapping;
    return add(std::move(f), 0);
}

}  // namespace bb
