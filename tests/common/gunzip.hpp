// A gzip stream inflated whole (a .pb.gz the pprof writer made), for the unit and the integration
// tests alike: one copy, so both read a profile the same way.
#pragma once
#include <zlib.h>

#include <optional>
#include <string>
#include <string_view>

namespace bbt {

// Its bytes; nullopt unless `gz` is one whole gzip stream (a truncated file is not a profile).
inline std::optional<std::string> gunzip(std::string_view gz) {
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return std::nullopt;  // 16: gzip, not zlib
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
    z.avail_in = static_cast<uInt>(gz.size());
    std::string out;
    char buf[65536];
    int rc;
    do {
        z.next_out = reinterpret_cast<Bytef*>(buf);
        z.avail_out = sizeof buf;
        rc = inflate(&z, Z_NO_FLUSH);
        out.append(buf, sizeof buf - z.avail_out);
    } while (rc == Z_OK);
    inflateEnd(&z);
    if (rc != Z_STREAM_END) return std::nullopt;
    return out;
}

}  // namespace bbt
