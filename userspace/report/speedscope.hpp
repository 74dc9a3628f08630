// speedscope's own file format (https://www.speedscope.app/file-format-schema.json): a
// "sampled" profile over shared frames, opened by dropping the file on the app or with
// `speedscope FILE`.
#pragma once
#include <ostream>

#include "profile/profile.hpp"

namespace bb {

// One profile of every sample, then one per scheduler kind ("scheduler", "dirty cpu
// scheduler", "dirty io scheduler") when samples of more than one kind are present.
void write_speedscope(const Profile& p, std::ostream& out);

}  // namespace bb
