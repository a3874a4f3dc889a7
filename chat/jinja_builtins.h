// Built-ins of the chat-template interpreter (internal to chat/): Jinja filters and
// tests, Python methods of str/dict/list, and the globals Hugging Face provides (range,
// namespace, dict, raise_exception, strftime_now). jinja_builtins.cpp holds filters,
// tests and globals; jinja_methods.cpp the methods and Python string operations. The
// tables are constant; every function is thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"
#include "common/status.h"

namespace hearth::jinja {

class Interpreter;

// Whether a filter or test of that name exists (checked when a template is parsed).
bool has_filter(std::string_view name);
bool has_test(std::string_view name);

// `subject | name(args)`.
Result<Value> apply_filter(Interpreter& interp, std::string_view name, const Value& subject, CallArgs& args);
// `subject is name(args)`.
Result<bool> apply_test(Interpreter& interp, std::string_view name, const Value& subject, CallArgs& args);

// `obj.name` when it names a method of obj's type (str.strip, dict.items, ...): the bound
// method; for methods that would modify a list or dict, an Undefined saying so; nullopt
// when obj's type has no such method.
std::optional<Value> get_method(const Value& obj, std::string_view name);

// The global function `name` (range, namespace, dict, raise_exception, strftime_now), or
// Undefined.
Value get_global(std::string_view name);

// ---- shared by filters and methods ----

// Call arguments bound to parameter names Python's way (positional, then keywords);
// unset parameters are nullopt. Fails on extra, unknown or repeated arguments.
using BoundArgs = std::vector<std::optional<Value>>;
Result<BoundArgs> bind_args(std::string_view fn, CallArgs& args, std::initializer_list<std::string_view> names);

// `value` as a str argument (fails naming fn and the type otherwise).
Result<std::string> want_string(std::string_view fn, const Value& value);
// `value` as an int argument (bool counts; fails otherwise).
Result<int64_t> want_int(std::string_view fn, const Value& value);

// Python's str.upper(), str.lower() (full Unicode case mapping), str.capitalize(),
// str.title(), and Jinja's title filter (words split at whitespace, - ( { [ <).
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);
std::string jinja_title(std::string_view s);
// Python's str.strip/lstrip/rstrip: whitespace when `chars` is null, else those code points.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// Python's str.replace (count < 0: all; an empty `old` inserts between code points).
Result<std::string> py_replace(Interpreter& interp, std::string_view s, std::string_view old,
                               std::string_view replacement, int64_t count);
// Python's str.splitlines() without line ends.
std::vector<std::string> py_splitlines(std::string_view s);

// Python's `format % args` (printf-style: %s %r %a %d %i %u %f %e %g %x %o %c %%, flags,
// width, precision, %(name)s with a dict).
Result<std::string> percent_format(Interpreter& interp, std::string_view format, const Value& args);

// A Python slice [start:stop:step]: negative bounds count from the end, step may be
// negative; `has_*` false means the bound was omitted.
struct SliceSpec {
  bool has_start = false, has_stop = false;
  int64_t start = 0, stop = 0, step = 1;
};
// The items a slice selects from a sequence of `length`: index start, start + step, ...
// (count of them). Fails for step 0.
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  size_t count = 0;
};
Result<SliceRange> slice_range(size_t length, const SliceSpec& spec);

}  // namespace hearth::jinja
