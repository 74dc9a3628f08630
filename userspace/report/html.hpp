// A self-contained interactive flame graph: one HTML file with the page (flamegraph.html,
// compiled in) and the profile merged into a call tree, viewable offline in any browser.
#pragma once
#include <ostream>

#include "profile/profile.hpp"

namespace bb {

void write_html(const Profile& p, std::ostream& out);

}  // namespace bb
