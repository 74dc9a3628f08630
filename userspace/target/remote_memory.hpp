// Reads of the target VM's memory. The target is untrusted input and is never written:
// every read is bounded by its caller and may fail (unmapped, process gone).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace bb {

class RemoteMemory {
public:
    explicit RemoteMemory(pid_t pid) : pid_(pid) {}
    pid_t pid() const { return pid_; }

    // All or nothing: true only if all of dst was filled.
    bool read(uint64_t addr, std::span<std::byte> dst) const;

    template <class T>
    std::optional<T> read(uint64_t addr) const {
        T v;
        if (!read(addr, std::as_writable_bytes(std::span(&v, 1)))) return std::nullopt;
        return v;
    }

    // Exactly `len` bytes, or nothing when any of them could not be read.
    std::optional<std::vector<std::byte>> read_bytes(uint64_t addr, size_t len) const;
    // Many small reads in few system calls (a table's worth of fields): what read() answers for
    // each piece, at ok[i]. One that cannot be read costs a call of its own, never the others.
    struct Piece {
        uint64_t addr;
        std::span<std::byte> dst;
    };
    std::vector<bool> read_many(std::span<const Piece> pieces) const;

private:
    pid_t pid_;
};

}  // namespace bb
