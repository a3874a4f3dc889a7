// Who may call the HTTP API. API keys: given on the command line (--api-key), in files
// (--api-key-file: one key per line, blank lines and lines starting with # skipped) or
// in the environment (HEARTH_API_KEY, several separated by commas); keys are printable
// ASCII without spaces, 8 to 512 characters. Browser origins: --cors-origin, `*` or
// scheme://host[:port]. hearth-frontend and `hearth serve` read these flags alike.
#pragma once

#include <string>
#include <vector>

#include "common/args.h"
#include "common/status.h"

namespace hearth {

inline constexpr const char* kApiKeyEnv = "HEARTH_API_KEY";

// Every key from `keys`, the `files` and $HEARTH_API_KEY, in that order, without
// duplicates; an unreadable file, a file without keys or a malformed key is an error
// naming where it came from (never the key itself).
Result<std::vector<std::string>> collect_api_keys(const std::vector<std::string>& keys,
                                                  const std::vector<std::string>& files);

struct AccessFlags {
  std::vector<std::string> api_keys;
  bool metrics_auth = false;
  std::vector<std::string> cors_origins;
};
// --api-key, --api-key-file (and the environment), --metrics-auth (which needs a key) and
// --cors-origin from `args`, checked; errors name the flag.
Result<AccessFlags> access_flags(const Args& args);

}  // namespace hearth
