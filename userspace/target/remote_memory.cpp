#include "target/remote_memory.hpp"

#include <sys/uio.h>

namespace bb {

bool RemoteMemory::read(uint64_t addr, std::span<std::byte> dst) const {
    if (dst.empty()) return true;
    if (addr == 0 || addr + dst.size() < addr) return false;
    iovec local{dst.data(), dst.size()};
    iovec remote{reinterpret_cast<void*>(addr), dst.size()};
    ssize_t n = process_vm_readv(pid_, &local, 1, &remote, 1, 0);
    return n == static_cast<ssize_t>(dst.size());
}

std::optional<std::vector<std::byte>> RemoteMemory::read_bytes(uint64_t addr, size_t len) const {
    std::vector<std::byte> buf(len);
    if (!read(addr, buf)) return std::nullopt;
    return buf;
}

}  // namespace bb
