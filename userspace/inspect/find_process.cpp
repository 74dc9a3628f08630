#include "inspect/find_process.hpp"

#include <fmt/format.h>

namespace bb {

uint64_t find_process(const Vm& vm, ProcessNames& names, const std::string& text, const std::string& flag) {
    const PidLayout& pids = vm.release().pids;
    if (text.starts_with('<')) {
        auto pid = vm.parse_pid(text);
        if (!pid)
            throw UserError(fmt::format("{} {}: not a pid of OTP {} (a local pid like <0.85.0>: numbers below 2^{}, "
                                        "serials below 2^{})",
                                        flag, text, vm.release().major, pids.num_bits, pids.data_bits - pids.num_bits));
        return *pid & pids.mask();
    }
    if (!names.unavailable().empty())
        throw UserError(fmt::format("{} {}: registered names cannot be read here: {}; give a pid", flag, text,
                                    names.unavailable()));
    auto pid = names.whereis(text);
    if (!pid) throw UserError(fmt::format("{} {}: no process is registered under that name", flag, text));
    return *pid & pids.mask();
}

}  // namespace bb
