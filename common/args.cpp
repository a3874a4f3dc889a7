#include "common/args.h"

#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace hearth {

Result<Args> Args::parse(const std::vector<std::string>& argv, const std::set<std::string>& value_flags,
                         const std::set<std::string>& bool_flags, bool allow_positionals) {
  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (!a.starts_with("--") || a == "--") {
      if (!allow_positionals || a.starts_with("-")) {
        return make_error(ErrorCode::kInvalidArgument, "unexpected argument \"{}\"", a);
      }
      args.positionals_.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::optional<std::string> inline_value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (value_flags.contains(name)) {
      if (inline_value) {
        args.values_[name].push_back(*inline_value);
      } else if (i + 1 < argv.size()) {
        args.values_[name].push_back(argv[++i]);
      } else {
        return make_error(ErrorCode::kInvalidArgument, "--{} needs a value", name);
      }
    } else if (bool_flags.contains(name)) {
      if (inline_value) return make_error(ErrorCode::kInvalidArgument, "--{} takes no value", name);
      args.bools_.insert(name);
    } else {
      return make_error(ErrorCode::kInvalidArgument, "unknown flag --{}", name);
    }
  }
  return args;
}

std::optional<std::string> Args::get(const std::string& flag) const {
  const auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Args::get_all(const std::string& flag) const {
  const auto it = values_.find(flag);
  return it == values_.end() ? std::vector<std::string>() : it->second;
}

Result<std::optional<int64_t>> Args::get_int(const std::string& flag, int64_t min, int64_t max) const {
  const auto v = get(flag);
  if (!v) return std::optional<int64_t>();
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || std::isspace(static_cast<unsigned char>(v->front())) || *end != '\0' || errno != 0 || n < min ||
      n > max) {
    return make_error(ErrorCode::kInvalidArgument, "--{} must be an integer in {}..{}, not \"{}\"", flag, min, max,
                      *v);
  }
  return std::optional<int64_t>(n);
}

Result<std::optional<double>> Args::get_double(const std::string& flag) const {
  const auto v = get(flag);
  if (!v) return std::optional<double>();
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v->c_str(), &end);
  if (v->empty() || std::isspace(static_cast<unsigned char>(v->front())) || *end != '\0' || errno != 0 ||
      !std::isfinite(d)) {
    return make_error(ErrorCode::kInvalidArgument, "--{} must be a number, not \"{}\"", flag, *v);
  }
  return std::optional<double>(d);
}

}  // namespace hearth
