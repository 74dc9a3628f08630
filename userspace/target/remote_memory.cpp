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

std::vector<bool> RemoteMemory::read_many(std::span<const Piece> pieces) const {
    constexpr size_t kMaxIov = 1024;  // UIO_MAXIOV: the most one process_vm_readv() takes
    std::vector<bool> ok(pieces.size(), false);
    std::vector<iovec> local, remote;
    std::vector<size_t> sent;  // which piece each iovec is
    for (size_t next = 0; next < pieces.size();) {
        local.clear(), remote.clear(), sent.clear();
        size_t j = next;
        for (; j < pieces.size() && sent.size() < kMaxIov; j++) {
            const Piece& p = pieces[j];
            if (p.dst.empty()) ok[j] = true;
            if (p.dst.empty() || p.addr == 0 || p.addr + p.dst.size() < p.addr) continue;  // as read()
            local.push_back({p.dst.data(), p.dst.size()});
            remote.push_back({reinterpret_cast<void*>(p.addr), p.dst.size()});
            sent.push_back(j);
        }
        const ssize_t n = sent.empty()
                              ? 0
                              : process_vm_readv(pid_, local.data(), local.size(), remote.data(), remote.size(), 0);
        // The kernel stops at the first piece it cannot read whole: the ones before it were read.
        size_t whole = 0;
        for (size_t left = n > 0 ? static_cast<size_t>(n) : 0; whole < sent.size() && left >= local[whole].iov_len;
             whole++) {
            ok[sent[whole]] = true;
            left -= local[whole].iov_len;
        }
        next = whole == sent.size() ? j : sent[whole] + 1;  // past the one that failed
    }
    return ok;
}

std::optional<std::vector<std::byte>> RemoteMemory::read_bytes(uint64_t addr, size_t len) const {
    std::vector<std::byte> buf(len);
    if (!read(addr, buf)) return std::nullopt;
    return buf;
}

}  // namespace bb
