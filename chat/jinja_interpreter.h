// Renders a parsed chat template (internal to chat/). One Interpreter is one render:
// it owns the variable scopes, the output buffer and the budgets that stop runaway
// templates (steps, bytes built, output size, call depth). Not thread-safe; each render
// makes its own, so one Template may be rendered from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"
#include "common/status.h"

namespace hearth::jinja {

struct RenderLimits {
  uint64_t max_steps = 10'000'000;      // expressions, statements and loop iterations
  size_t max_output_bytes = 32u << 20;  // the output, and any one string built
  uint64_t bytes_per_step = 16;         // building a string or list costs size / this steps
  int max_call_depth = 64;              // nested macro calls
  int max_eval_depth = 500;             // nested evaluation (statements + expressions)
};

// Jinja2's `range` cap in sandboxed environments.
inline constexpr int64_t kMaxRange = 100'000;

class Interpreter {
 public:
  Interpreter(const Template& tmpl, RenderLimits limits);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders the template with these top-level variables. raise_exception("m") fails with
  // kInvalidArgument "m"; other errors carry the template line:column; a budget running
  // out is kResourceExhausted.
  Result<std::string> render(std::vector<std::pair<std::string, Value>> variables);

  // ---- for built-ins ----
  // Counts `n` steps against the budget.
  Status charge(uint64_t n);
  // Counts building a string of `bytes` (or a list of bytes / 8 items) against the
  // budgets; fails when one value would exceed max_output_bytes.
  Status charge_bytes(size_t bytes);
  // Calls a function value (Undefined fails with its hint, non-functions fail).
  Result<Value> call(const Value& callee, CallArgs& args);
  // The error raise_exception() returns: exactly `message`, never given a location.
  Status raise(std::string message);
  // `obj.name` with Jinja's rules (methods first, then items); missing -> Undefined.
  Result<Value> get_attr(const Value& obj, std::string_view name);
  // `obj[key]` with Jinja's rules (items first, then methods); missing -> Undefined.
  Result<Value> get_item(const Value& obj, const Value& key);
  // The items `for` iterates: list items, dict keys, string characters; Undefined is empty.
  Result<std::vector<Value>> iterate(const Value& v);
  // A new namespace(), emptied when the render ends so that cycles through it are freed.
  Value make_namespace();

 private:
  struct Frame;
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  Result<Flow> exec_body(const Body& body);
  Result<Flow> exec(const Stmt& s);
  Result<Flow> exec_for(const Stmt& s);
  Result<Flow> exec_set(const Stmt& s);
  Result<std::string> capture(const Body& body);
  Result<Value> apply_filters(const std::vector<ExprPtr>& filters, Value subject);
  Status assign(const Target& target, Value value);
  Status set_var(std::string name, Value value);
  Value make_macro(const std::shared_ptr<const MacroDef>& def);
  Result<Value> call_macro(const MacroDef& def, const std::shared_ptr<Frame>& closure, CallArgs& args);

  Result<Value> eval(const Expr& e);
  Result<Value> eval_inner(const Expr& e);
  Result<Value> eval_binary(Op op, const Value& a, const Value& b);
  Result<bool> eval_compare(Op op, const Value& a, const Value& b);
  Result<Value> eval_slice(const Expr& e);
  Result<CallArgs> eval_args(const Expr& e);
  Value lookup(std::string_view name) const;

  Status emit(std::string_view text);
  Status locate(const Status& status, SourcePos pos);
  Status exhausted(std::string_view what);

  const Template& tmpl_;
  RenderLimits limits_;
  std::shared_ptr<Frame> frame_;  // the innermost scope
  std::string* out_ = nullptr;    // where output goes (a macro or block captures its own)
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  bool located_ = false;  // the error being returned already says where it happened
  // Every namespace made and every scope a macro closes over: emptied when the render
  // ends, which frees the reference cycles they can be part of.
  std::vector<Value> namespaces_;
  std::vector<std::shared_ptr<Frame>> closures_;
};

}  // namespace hearth::jinja
