// A small command-line flag parser for the hearth CLI: `--name value`, `--name=value`
// and boolean `--name`. Unknown flags and malformed values are errors naming the flag.
// A flag given more than once keeps every value (get() returns the last, get_all()
// all of them); arguments that are not flags are an error unless the caller accepts
// positionals. Not thread-safe; used once per process.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hearth {

class Args {
 public:
  // value_flags take a value; bool_flags do not. argv[0] is the first flag, not the program.
  static Result<Args> parse(const std::vector<std::string>& argv, const std::set<std::string>& value_flags,
                            const std::set<std::string>& bool_flags, bool allow_positionals = false);

  bool has(const std::string& flag) const { return values_.contains(flag) || bools_.contains(flag); }
  std::optional<std::string> get(const std::string& flag) const;
  std::vector<std::string> get_all(const std::string& flag) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  Result<std::optional<int64_t>> get_int(const std::string& flag, int64_t min, int64_t max) const;
  Result<std::optional<double>> get_double(const std::string& flag) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positionals_;
  std::set<std::string> bools_;
};

}  // namespace hearth
