// The frame table the symbolizer fills and the reports read: each distinct function once
// (kind, shown name, the VM's name, file, first line, where its code is), each distinct
// (function, line) once as a location. Stacks are vectors of location ids.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "profile/profile.hpp"

namespace bb {

// "'Elixir.MyApp.Repo':all/2" -> "MyApp.Repo.all/2", as Elixir writes it; an Elixir anonymous
// function "'-run/1-fun-0-'/1" -> "anonymous fn/1 in MyApp.run/1". Erlang names and anything
// that does not parse come back unchanged.
std::string display_name(std::string_view vm_name);

// "_Z17beam_jit_call_bifP7process..." -> "beam_jit_call_bif"; anything else unchanged.
std::string short_demangled(const std::string& symbol);

class FrameTable {
public:
    explicit FrameTable(bool raw_names = false) : raw_names_(raw_names) {}
    // A location of an Erlang function, named as the JIT names it ("lists:foldl/3").
    uint32_t erlang(const std::string& vm_name, const std::string& module, const std::string* file, uint32_t start_line,
                    uint32_t line);
    // Any other frame: native symbols, "[kernel]", the VM's pseudo frames. C++ symbols are
    // shown demangled, without their parameters (the system name keeps them).
    uint32_t other(FrameKind kind, const std::string& name, const std::string& mapping);

    const Function& function(uint32_t location) const { return functions_[locations_[location].function]; }
    std::string label(uint32_t location, bool lines) const {
        return frame_label(function(location), locations_[location].line, lines);
    }
    bool is_erlang(uint32_t location) const { return function(location).kind == FrameKind::erlang; }
    const std::vector<Function>& functions() const { return functions_; }
    const std::vector<Location>& locations() const { return locations_; }
    size_t size() const { return locations_.size(); }

private:
    uint32_t add(Function f, uint32_t line);
    bool raw_names_;
    std::vector<Function> functions_;
    std::vector<Location> locations_;
    std::unordered_map<std::string, uint32_t> function_ids_;  // kind, system name, mapping
    std::unordered_map<uint64_t, uint32_t> location_ids_;     // function << 32 | line
};

}  // namespace bb
