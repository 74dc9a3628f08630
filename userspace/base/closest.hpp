// "Did you mean ...": the known names nearest to one a user typed (a native function for
// beam-bpf-blame, a registered process for --process), by edit distance.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace bb {

// Levenshtein distance: insertions, deletions and substitutions of one byte each.
size_t edit_distance(std::string_view a, std::string_view b);

// Up to `n` of `names`, nearest to `typed` first (ties in name order), duplicates once.
std::vector<std::string> closest(std::string_view typed, std::vector<std::string> names, size_t n);

// The one of `names` nearest to `typed` when it is near enough to be a slip of the keyboard (an
// edit per four bytes, two at least), for "did you mean NAME?"; "" when none is.
std::string slip_of(std::string_view typed, std::vector<std::string> names);

// "a, b, c" (or "a, b and c" with last " and "): for a message.
std::string join(const std::vector<std::string>& items, std::string_view sep = ", ", std::string_view last = {});

}  // namespace bb
