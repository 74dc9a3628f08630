#include "sampling/unwind_maps.hpp"

#include <bpf/bpf.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/error.hpp"

namespace bb {

namespace {

UniqueFd create_array(const char* name, uint32_t value_size, uint32_t entries) {
    int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, name, sizeof(uint32_t), value_size, entries, nullptr);
    if (fd < 0)
        throw UserError(fmt::format("cannot create the map {} ({} entries): {}", name, entries, std::strerror(errno)));
    return UniqueFd(fd);
}

template <typename T>
void write_at(int fd, uint32_t first, std::span<const T> values) {
    if (values.empty()) return;
    std::vector<uint32_t> keys(values.size());
    for (uint32_t i = 0; i < keys.size(); i++) keys[i] = first + i;
    uint32_t count = static_cast<uint32_t>(keys.size());
    LIBBPF_OPTS(bpf_map_batch_opts, opts);
    if (bpf_map_update_batch(fd, keys.data(), values.data(), &count, &opts))
        throw UserError(fmt::format("cannot load the native unwind tables into the kernel: {}", std::strerror(errno)));
}

}  // namespace

// The names are the walker's (bpf/maps.bpf.h), cut to the kernel's 15 characters.
UnwindMaps::UnwindMaps(uint32_t rows, uint32_t buckets)
    : rows_(create_array("unwind_rows", sizeof(bb_unwind_row), rows)),
      buckets_(create_array("unwind_buckets", sizeof(uint32_t), buckets)) {}

void UnwindMaps::write(uint32_t first_row, std::span<const bb_unwind_row> rows, uint32_t first_bucket,
                       std::span<const uint32_t> buckets) {
    write_at(rows_.get(), first_row, rows);
    write_at(buckets_.get(), first_bucket, buckets);
}

SharedUnwind SharedUnwind::create(uint32_t rows) {
    auto maps = std::make_shared<UnwindMaps>(rows, rows / 4);
    return {maps, UnwindStore::create(rows, rows / 4, maps)};
}

}  // namespace bb
