// What build this is: the project's version and the source commit it was configured
// from, for --version, /metrics (hearth_build_info) and system fingerprints.
#pragma once

#include <string>
#include <string_view>

namespace hearth {

// "0.1.0".
std::string_view hearth_version();
// The short commit hash of the source tree at configure time ("unknown" outside git).
std::string_view hearth_commit();
// "hearth-frontend 0.1.0 (commit 1a2b3c4)": what `--version` prints.
std::string version_line(std::string_view program);

}  // namespace hearth
