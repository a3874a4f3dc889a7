#include "common/api_keys.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace hearth {
namespace {

Status check_key(std::string_view key, std::string_view origin) {
  const bool printable = std::all_of(key.begin(), key.end(), [](char c) { return c > 0x20 && c < 0x7F; });
  if (key.size() < 8 || key.size() > 512 || !printable) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: an API key must be 8 to 512 printable characters without spaces", origin);
  }
  return Status::ok();
}

void add_unique(std::vector<std::string>& out, std::string key) {
  if (std::find(out.begin(), out.end(), key) == out.end()) out.push_back(std::move(key));
}

}  // namespace

Result<std::vector<std::string>> collect_api_keys(const std::vector<std::string>& keys,
                                                  const std::vector<std::string>& files) {
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    HEARTH_RETURN_IF_ERROR(check_key(k, "--api-key"));
    add_unique(out, k);
  }
  for (const std::string& path : files) {
    std::ifstream in(path);
    if (!in) return make_error(ErrorCode::kNotFound, "--api-key-file {}: cannot be read", path);
    size_t found = 0;
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
      const size_t start = line.find_first_not_of(" \t");
      if (start == std::string::npos || line[start] == '#') continue;
      line.erase(0, start);
      HEARTH_RETURN_IF_ERROR(check_key(line, fmt::format("--api-key-file {} line {}", path, line_no)));
      add_unique(out, line);
      ++found;
    }
    if (found == 0) return make_error(ErrorCode::kInvalidArgument, "--api-key-file {}: holds no key", path);
  }
  if (const char* env = std::getenv(kApiKeyEnv); env != nullptr && *env != '\0') {
    std::stringstream list(env);
    for (std::string k; std::getline(list, k, ',');) {
      HEARTH_RETURN_IF_ERROR(check_key(k, kApiKeyEnv));
      add_unique(out, k);
    }
  }
  return out;
}

Result<AccessFlags> access_flags(const Args& args) {
  AccessFlags a;
  HEARTH_ASSIGN_OR_RETURN(a.api_keys, collect_api_keys(args.get_all("api-key"), args.get_all("api-key-file")));
  a.metrics_auth = args.has("metrics-auth");
  if (a.metrics_auth && a.api_keys.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "--metrics-auth needs an API key (--api-key)");
  }
  a.cors_origins = args.get_all("cors-origin");
  for (const std::string& origin : a.cors_origins) {
    if (origin != "*" && !origin.starts_with("http://") && !origin.starts_with("https://")) {
      return make_error(ErrorCode::kInvalidArgument, "--cors-origin {}: an origin is * or scheme://host[:port]", origin);
    }
  }
  return a;
}

}  // namespace hearth
