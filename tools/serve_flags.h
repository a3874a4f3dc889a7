// The flags of `hearth serve`, as one table: what each takes, which processes it goes to,
// how it is checked, and its help. The parser, the validation (all of it before any
// process starts), `--help`, the config file's keys and docs/configuration.md all come
// from this table, so none of them can drift from the others.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/args.h"
#include "common/status.h"

namespace hearth::cli {

// Where a flag goes: `hearth serve` itself and/or its children.
enum ServeTarget : unsigned {
  kToServe = 1,
  kToLoader = 2,
  kToEngine = 4,
  kToFrontend = 8,
};

enum class FlagKind {
  kBool,    // --name
  kInt,     // --name N, within [min, max]
  kChoice,  // --name one of `choices` ("a|b|c")
  kText,    // --name TEXT (checked by serve itself where it means more)
  kPath,    // --name PATH, which must exist
};

struct ServeFlag {
  std::string_view name;
  FlagKind kind;
  std::string_view value;  // the placeholder in help ("N", "MS", "PATH")
  unsigned targets;
  std::string_view help;
  std::string_view section;
  int64_t min = 0, max = 0;       // kInt
  std::string_view choices;       // kChoice
  bool repeatable = false;
  std::string_view child_name;    // the children's name for it, when it differs
  std::string_view default_text;  // for the reference ("" when the help says it)
};

std::span<const ServeFlag> serve_flags();
const ServeFlag* find_serve_flag(std::string_view name);

// `hearth serve`'s arguments: `MODEL` (positional) or `-m MODEL` for --model, then the
// config file's keys for every flag not given on the command line (flags win), every
// value checked against the table. Errors name the flag (or the file and line).
Result<Args> parse_serve_args(const std::vector<std::string>& argv);

// A config file (YAML or TOML, by its extension; one key per flag, `_` or `-` in names):
// the flags it sets, in file order, as `--name value` pairs ready for Args (lists give a
// repeatable flag several values; `true` / `false` set or leave a boolean).
Result<std::vector<std::string>> read_config_file(const std::string& path);

// The `--help` text and the Markdown reference (docs/configuration.md).
std::string serve_usage();
std::string serve_flag_reference();

}  // namespace hearth::cli
