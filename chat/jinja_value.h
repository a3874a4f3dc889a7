// Values of the chat-template interpreter (internal to chat/): a Python-like dynamic
// type with Jinja's Undefined, and the Python semantics templates rely on (truthiness,
// str()/repr(), ==, <, json.dumps). Strings are UTF-8; lengths, indexes and slices count
// code points as Python does.
//
// Values share their payload: copying one is cheap and lists, tuples and dicts are never
// changed after they are built (the sandbox is immutable). Only a Namespace is mutable.
// A Value is thread-compatible; one render uses its values from one thread.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"
#include "common/utf8.h"

namespace hearth::jinja {

class Value;
class Interpreter;

// Deepest nesting of lists/dicts a value may have; deeper input or results are refused.
inline constexpr int kMaxValueDepth = 128;

struct ListObj {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;  // 1 + the deepest item's depth
};

// A Python dict: insertion-ordered, keys compared with Python ==.
struct DictObj {
  std::vector<std::pair<Value, Value>> entries;
  int depth = 1;

  // The value under `key`, or nullptr.
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts or replaces `key` (keeps its first position, as Python does).
  void set(Value key, Value value);
};

// Jinja's namespace(): the one mutable object, changed by `{% set ns.x = ... %}`.
struct NamespaceObj {
  DictObj attrs;
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A callable: a global function, a bound method, a macro or loop.cycle.
struct FunctionObj {
  using Fn = std::function<Result<Value>(Interpreter&, CallArgs&)>;
  std::string name;
  Fn fn;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined = 0,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // list or tuple (ListObj::is_tuple)
    kDict,
    kNamespace,
    kFunction,
  };

  // Undefined with no explanation.
  Value() = default;
  // Undefined; `hint` is the error raised when it is used ("'x' is undefined").
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value dict(DictObj d);
  static Value new_namespace();
  static Value function(std::string name, FunctionObj::Fn fn);
  // JSON -> Value (objects become dicts, numbers int or float). Fails past kMaxValueDepth.
  static Result<Value> from_json(const boost::json::value& json);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_tuple() const { return is_list() && as_list().is_tuple; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_function() const { return kind() == Kind::kFunction; }

  // Accessors; each requires the matching kind.
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return *std::get<StrPtr>(v_); }
  const ListObj& as_list() const { return *std::get<ListPtr>(v_); }
  const DictObj& as_dict() const { return *std::get<DictPtr>(v_); }
  NamespaceObj& as_namespace() const { return *std::get<NsPtr>(v_); }
  const FunctionObj& as_function() const { return *std::get<FnPtr>(v_); }
  // The error message using this undefined value raises.
  std::string undefined_hint() const;

  // int/bool/float as a double (requires is_number()).
  double to_double() const;
  // int or bool as an int64 (requires is_int() or is_bool()).
  int64_t to_int() const { return is_bool() ? (as_bool() ? 1 : 0) : as_int(); }
  // Python truthiness; Undefined is false.
  bool truthy() const;
  // Nesting depth: 0 for scalars, 1 for a flat list or dict.
  int depth() const;
  // Python's type name: "str", "int", "list", "dict", "NoneType", "Undefined", ...
  std::string_view type_name() const;
  // True when both hold the same namespace or function object.
  bool same_object(const Value& other) const;

 private:
  using StrPtr = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const ListObj>;
  using DictPtr = std::shared_ptr<const DictObj>;
  using NsPtr = std::shared_ptr<NamespaceObj>;
  using FnPtr = std::shared_ptr<const FunctionObj>;
  struct Undef {
    std::shared_ptr<const std::string> hint;
  };
  std::variant<Undef, std::monostate, bool, int64_t, double, StrPtr, ListPtr, DictPtr, NsPtr, FnPtr> v_;
};

// Python ==: numbers across int/float/bool, lists and tuples item by item (a list never
// equals a tuple), dicts by content, namespaces and functions by identity, Undefined
// equals only Undefined.
bool values_equal(const Value& a, const Value& b);
// Python <, as -1/0/1: numbers, strings (code point order), lists/tuples of the same
// kind lexicographically. Other pairs fail like Python's TypeError.
Result<int> values_compare(const Value& a, const Value& b);

// Python str(): what `{{ value }}` prints. Undefined prints "".
Result<std::string> value_to_str(const Value& v);
// Python repr(), used inside containers ("['a', 1, None]").
Result<std::string> value_repr(const Value& v);
// Python repr() of a float ("1.0", "0.1", "1e+16").
std::string float_repr(double d);

struct JsonOptions {
  int indent = -1;             // < 0: one line; otherwise newline and this many spaces per level
  std::string item_separator;  // empty: ", " on one line, "," when indented
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python json.dumps with the given options (the tojson filter Hugging Face installs).
Result<std::string> value_to_json(const Value& v, const JsonOptions& options);

// Python's str.isspace() for one code point. (Python's code point view of a str, with
// invalid bytes as one code point each: utf8_next, utf8_length, utf8_offsets in
// common/utf8.h.)
bool is_py_space(char32_t cp);

}  // namespace hearth::jinja
