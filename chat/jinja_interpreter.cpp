#include "chat/jinja_interpreter.h"

#include <algorithm>
#include <cmath>

#include "chat/jinja_builtins.h"

namespace hearth::jinja {

struct Interpreter::Frame {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const {
    for (const auto& [k, v] : vars) {
      if (k == name) return &v;
    }
    return nullptr;
  }
  void set(std::string name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(std::move(name), std::move(value));
  }
};

namespace {

Status type_error(std::string message) { return Status(ErrorCode::kInvalidArgument, std::move(message)); }

Status undefined_error(const Value& v) { return Status(ErrorCode::kInvalidArgument, v.undefined_hint()); }

// Jinja2's object_type_repr: "None", or "<type> object".
std::string type_desc(const Value& v) {
  if (v.is_none()) return "None";
  return fmt::format("{} object", v.type_name());
}

Value missing_attribute(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", type_desc(obj), name));
}

Value missing_element(const Value& obj, const Value& key) {
  auto repr = value_repr(key);
  return Value::undefined(fmt::format("{} has no element {}", type_desc(obj), repr.is_ok() ? *repr : "?"));
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// The code point at `index` (negative counts from the end) as a string, or nullopt.
std::optional<std::string> string_at(std::string_view s, int64_t index) {
  if (is_ascii(s)) {
    const auto n = static_cast<int64_t>(s.size());
    if (index < 0) index += n;
    if (index < 0 || index >= n) return std::nullopt;
    return std::string(1, s[static_cast<size_t>(index)]);
  }
  const std::vector<size_t> offsets = utf8_offsets(s);
  const auto n = static_cast<int64_t>(offsets.size() - 1);
  if (index < 0) index += n;
  if (index < 0 || index >= n) return std::nullopt;
  const auto i = static_cast<size_t>(index);
  return std::string(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
}

// Python's // and % on ints (floor division; the remainder takes the divisor's sign).
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Status operand_error(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  return type_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

std::string_view op_symbol(Op op) {
  switch (op) {
    case Op::kAdd:
      return "+";
    case Op::kSub:
      return "-";
    case Op::kMul:
      return "*";
    case Op::kDiv:
      return "/";
    case Op::kFloorDiv:
      return "//";
    case Op::kMod:
      return "%";
    case Op::kPow:
      return "**";
    case Op::kConcat:
      return "~";
    default:
      return "?";
  }
}

// Restores a saved value when a scope ends, error or not.
template <typename T>
class Restore {
 public:
  explicit Restore(T& slot) : slot_(slot), saved_(slot) {}
  ~Restore() { slot_ = std::move(saved_); }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;

 private:
  T& slot_;
  T saved_;
};

class DepthGuard {
 public:
  explicit DepthGuard(int& depth) : depth_(depth) { ++depth_; }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

}  // namespace

Interpreter::Interpreter(const Template& tmpl, RenderLimits limits) : tmpl_(tmpl), limits_(limits) {}

Interpreter::~Interpreter() {
  // A namespace may hold itself (directly or through a list), and a macro holds the scope
  // that holds the macro; emptying them all breaks every such cycle.
  for (Value& ns : namespaces_) ns.as_namespace().attrs.entries.clear();
  for (const std::shared_ptr<Frame>& frame : closures_) {
    frame->vars.clear();
    frame->parent.reset();
  }
}

Result<std::string> Interpreter::render(std::vector<std::pair<std::string, Value>> variables) {
  auto root = std::make_shared<Frame>();
  root->vars = std::move(variables);
  frame_ = root;
  std::string out;
  out_ = &out;
  auto flow = exec_body(tmpl_.body);
  out_ = nullptr;
  frame_.reset();
  if (!flow.is_ok()) return flow.status();
  return out;
}

Status Interpreter::charge(uint64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    return exhausted(fmt::format("the template ran more than {} steps", limits_.max_steps));
  }
  return Status::ok();
}

Status Interpreter::charge_bytes(size_t bytes) {
  if (bytes > limits_.max_output_bytes) {
    return exhausted(fmt::format("the template built a value larger than {} bytes", limits_.max_output_bytes));
  }
  return charge(bytes / std::max<uint64_t>(limits_.bytes_per_step, 1));
}

Status Interpreter::exhausted(std::string_view what) {
  return Status(ErrorCode::kResourceExhausted, fmt::format("chat template stopped: {}", what));
}

Status Interpreter::raise(std::string message) {
  located_ = true;
  return Status(ErrorCode::kInvalidArgument, std::move(message));
}

Status Interpreter::locate(const Status& status, SourcePos pos) {
  if (located_) return status;
  located_ = true;
  return template_error(status.code(), pos, status.message());
}

Value Interpreter::make_namespace() {
  Value ns = Value::new_namespace();
  namespaces_.push_back(ns);
  return ns;
}

Status Interpreter::emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    return exhausted(fmt::format("the output grew past {} bytes", limits_.max_output_bytes));
  }
  HEARTH_RETURN_IF_ERROR(charge(text.size() / std::max<uint64_t>(limits_.bytes_per_step, 1)));
  out_->append(text);
  return Status::ok();
}

Value Interpreter::lookup(std::string_view name) const {
  for (const Frame* f = frame_.get(); f != nullptr; f = f->parent.get()) {
    if (const Value* v = f->find(name)) return *v;
  }
  Value global = get_global(name);
  if (!global.is_undefined()) return global;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Status Interpreter::set_var(std::string name, Value value) {
  frame_->set(std::move(name), std::move(value));
  return Status::ok();
}

// ---- statements -----------------------------------------------------------------------

Result<Interpreter::Flow> Interpreter::exec_body(const Body& body) {
  for (const StmtPtr& s : body) {
    HEARTH_ASSIGN_OR_RETURN(Flow flow, exec(*s));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<std::string> Interpreter::capture(const Body& body) {
  std::string buffer;
  Restore<std::string*> restore(out_);
  out_ = &buffer;
  HEARTH_ASSIGN_OR_RETURN(Flow flow, exec_body(body));
  (void)flow;  // loop controls end the captured block, as they end any block
  return buffer;
}

Result<Value> Interpreter::apply_filters(const std::vector<ExprPtr>& filters, Value subject) {
  for (const ExprPtr& f : filters) {
    HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_args(*f));
    auto result = apply_filter(*this, f->name, subject, args);
    if (!result.is_ok()) return locate(result.status(), f->pos);
    subject = std::move(result).value();
  }
  return subject;
}

Result<Interpreter::Flow> Interpreter::exec(const Stmt& s) {
  DepthGuard depth(eval_depth_);
  if (eval_depth_ > limits_.max_eval_depth) {
    return locate(exhausted("the template nested too deeply while rendering"), s.pos);
  }
  if (Status st = charge(1); !st.is_ok()) return locate(st, s.pos);
  switch (s.kind) {
    case StmtKind::kText:
      if (Status st = emit(s.text); !st.is_ok()) return locate(st, s.pos);
      return Flow::kNormal;
    case StmtKind::kOutput: {
      HEARTH_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
      auto text = value_to_str(v);
      if (!text.is_ok()) return locate(text.status(), s.pos);
      if (Status st = emit(*text); !st.is_ok()) return locate(st, s.pos);
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      for (size_t i = 0; i < s.conditions.size(); ++i) {
        HEARTH_ASSIGN_OR_RETURN(Value cond, eval(*s.conditions[i]));
        if (cond.truthy()) return exec_body(s.bodies[i]);
      }
      if (s.bodies.size() > s.conditions.size()) return exec_body(s.bodies.back());
      return Flow::kNormal;
    case StmtKind::kFor:
      return exec_for(s);
    case StmtKind::kSet:
    case StmtKind::kSetBlock:
      return exec_set(s);
    case StmtKind::kMacro:
      HEARTH_RETURN_IF_ERROR(set_var(s.macro->name, make_macro(s.macro)));
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      const Expr& call_expr = *s.expr;
      HEARTH_ASSIGN_OR_RETURN(Value callee, eval(*call_expr.operands[0]));
      HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_args(call_expr));
      args.keyword.emplace_back("caller", make_macro(s.macro));
      auto result = call(callee, args);
      if (!result.is_ok()) return locate(result.status(), call_expr.pos);
      auto text = value_to_str(*result);
      if (!text.is_ok()) return locate(text.status(), s.pos);
      if (Status st = emit(*text); !st.is_ok()) return locate(st, s.pos);
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      HEARTH_ASSIGN_OR_RETURN(std::string body, capture(s.bodies[0]));
      HEARTH_ASSIGN_OR_RETURN(Value v, apply_filters(s.filters, Value::string(std::move(body))));
      auto text = value_to_str(v);
      if (!text.is_ok()) return locate(text.status(), s.pos);
      if (Status st = emit(*text); !st.is_ok()) return locate(st, s.pos);
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      std::vector<Value> values;
      for (const ExprPtr& e : s.with_values) {
        HEARTH_ASSIGN_OR_RETURN(Value v, eval(*e));
        values.push_back(std::move(v));
      }
      Restore<std::shared_ptr<Frame>> restore(frame_);
      frame_ = std::make_shared<Frame>(Frame{frame_, {}});
      for (size_t i = 0; i < values.size(); ++i) {
        if (Status st = assign(s.with_targets[i], std::move(values[i])); !st.is_ok()) return locate(st, s.pos);
      }
      return exec_body(s.bodies[0]);
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kScope: {
      Restore<std::shared_ptr<Frame>> restore(frame_);
      frame_ = std::make_shared<Frame>(Frame{frame_, {}});
      return exec_body(s.bodies[0]);
    }
  }
  return locate(Status(ErrorCode::kInternal, "unknown statement"), s.pos);
}

Result<Interpreter::Flow> Interpreter::exec_for(const Stmt& s) {
  HEARTH_ASSIGN_OR_RETURN(Value seq, eval(*s.expr));
  auto iterated = iterate(seq);
  if (!iterated.is_ok()) return locate(iterated.status(), s.expr->pos);
  std::vector<Value> items = std::move(iterated).value();
  Restore<std::shared_ptr<Frame>> restore(frame_);
  const std::shared_ptr<Frame> outer = frame_;
  if (!s.conditions.empty()) {  // `for x in xs if cond`: filtered before the loop counts
    std::vector<Value> kept;
    for (Value& item : items) {
      frame_ = std::make_shared<Frame>(Frame{outer, {}});
      if (Status st = assign(s.target, item); !st.is_ok()) return locate(st, s.pos);
      HEARTH_ASSIGN_OR_RETURN(Value cond, eval(*s.conditions[0]));
      if (cond.truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  static const Value kIndex = Value::string("index"), kIndex0 = Value::string("index0"),
                     kRevindex = Value::string("revindex"), kRevindex0 = Value::string("revindex0"),
                     kFirst = Value::string("first"), kLast = Value::string("last"), kLength = Value::string("length"),
                     kPrevitem = Value::string("previtem"), kNextitem = Value::string("nextitem"),
                     kDepth = Value::string("depth"), kDepth0 = Value::string("depth0"),
                     kCycle = Value::string("cycle");
  const auto n = static_cast<int64_t>(items.size());
  auto current = std::make_shared<int64_t>(0);
  const Value cycle = Value::function("loop.cycle", [current](Interpreter&, CallArgs& args) -> Result<Value> {
    if (args.positional.empty()) return type_error("no items for cycling given");
    const auto count = static_cast<int64_t>(args.positional.size());
    return args.positional[static_cast<size_t>(*current % count)];
  });
  for (int64_t i = 0; i < n; ++i) {
    if (Status st = charge(1); !st.is_ok()) return locate(st, s.pos);
    *current = i;
    frame_ = std::make_shared<Frame>(Frame{outer, {}});
    const auto idx = static_cast<size_t>(i);
    if (Status st = assign(s.target, items[idx]); !st.is_ok()) return locate(st, s.pos);
    if (!s.uses_loop) {
      HEARTH_ASSIGN_OR_RETURN(Flow flow, exec_body(s.bodies[0]));
      if (flow == Flow::kBreak) break;
      continue;
    }
    DictObj loop;
    loop.entries.reserve(12);
    loop.entries.emplace_back(kIndex, Value::integer(i + 1));
    loop.entries.emplace_back(kIndex0, Value::integer(i));
    loop.entries.emplace_back(kRevindex, Value::integer(n - i));
    loop.entries.emplace_back(kRevindex0, Value::integer(n - i - 1));
    loop.entries.emplace_back(kFirst, Value::boolean(i == 0));
    loop.entries.emplace_back(kLast, Value::boolean(i == n - 1));
    loop.entries.emplace_back(kLength, Value::integer(n));
    loop.entries.emplace_back(kPrevitem, i > 0 ? items[idx - 1] : Value::undefined("there is no previous item"));
    loop.entries.emplace_back(kNextitem, i + 1 < n ? items[idx + 1] : Value::undefined("there is no next item"));
    loop.entries.emplace_back(kDepth, Value::integer(1));
    loop.entries.emplace_back(kDepth0, Value::integer(0));
    loop.entries.emplace_back(kCycle, cycle);
    frame_->set("loop", Value::dict(std::move(loop)));
    HEARTH_ASSIGN_OR_RETURN(Flow flow, exec_body(s.bodies[0]));
    if (flow == Flow::kBreak) break;
  }
  if (n == 0 && s.bodies.size() > 1) {
    frame_ = std::make_shared<Frame>(Frame{outer, {}});
    return exec_body(s.bodies[1]);
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec_set(const Stmt& s) {
  Value value;
  if (s.kind == StmtKind::kSet) {
    HEARTH_ASSIGN_OR_RETURN(value, eval(*s.expr));
  } else {
    HEARTH_ASSIGN_OR_RETURN(std::string body, capture(s.bodies[0]));
    HEARTH_ASSIGN_OR_RETURN(value, apply_filters(s.filters, Value::string(std::move(body))));
  }
  if (Status st = assign(s.target, std::move(value)); !st.is_ok()) return locate(st, s.pos);
  return Flow::kNormal;
}

Status Interpreter::assign(const Target& target, Value value) {
  switch (target.kind) {
    case Target::Kind::kName:
      return set_var(target.name, std::move(value));
    case Target::Kind::kAttr: {
      const Value ns = lookup(target.name);
      if (!ns.is_namespace()) {
        if (ns.is_undefined()) return undefined_error(ns);
        return type_error("cannot assign attribute on non-namespace object");
      }
      ns.as_namespace().attrs.set(Value::string(target.attr), std::move(value));
      return Status::ok();
    }
    case Target::Kind::kTuple: {
      if (value.is_undefined()) return undefined_error(value);
      if (!value.is_list() && !value.is_string() && !value.is_dict()) {
        return type_error(fmt::format("cannot unpack non-iterable {} object", value.type_name()));
      }
      HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(value));
      if (items.size() < target.items.size()) {
        return type_error(
            fmt::format("not enough values to unpack (expected {}, got {})", target.items.size(), items.size()));
      }
      if (items.size() > target.items.size()) {
        return type_error(fmt::format("too many values to unpack (expected {})", target.items.size()));
      }
      for (size_t i = 0; i < items.size(); ++i) {
        HEARTH_RETURN_IF_ERROR(assign(target.items[i], std::move(items[i])));
      }
      return Status::ok();
    }
  }
  return Status(ErrorCode::kInternal, "unknown assignment target");
}

Value Interpreter::make_macro(const std::shared_ptr<const MacroDef>& def) {
  // The template (and so `def`) outlives every render. The macro keeps the scope it was
  // defined in alive, as a Python closure does; the destructor breaks that cycle.
  const MacroDef* macro = def.get();
  std::shared_ptr<Frame> closure = frame_;
  if (closures_.empty() || closures_.back() != closure) closures_.push_back(closure);
  return Value::function(macro->name, [macro, closure](Interpreter& interp, CallArgs& args) {
    return interp.call_macro(*macro, closure, args);
  });
}

Result<Value> Interpreter::call_macro(const MacroDef& def, const std::shared_ptr<Frame>& closure, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    return exhausted(fmt::format("macro calls nested more than {} deep", limits_.max_call_depth));
  }
  DepthGuard calls(call_depth_);
  Restore<std::shared_ptr<Frame>> restore_frame(frame_);
  frame_ = std::make_shared<Frame>(Frame{closure, {}});
  std::vector<bool> bound(def.params.size(), false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < def.params.size()) {
      frame_->set(def.params[i], std::move(args.positional[i]));
      bound[i] = true;
    } else {
      varargs.push_back(std::move(args.positional[i]));
    }
  }
  DictObj kwargs;
  Value caller;
  for (auto& [name, value] : args.keyword) {
    const auto it = std::find(def.params.begin(), def.params.end(), name);
    if (it != def.params.end()) {
      const auto i = static_cast<size_t>(it - def.params.begin());
      if (bound[i]) return type_error(fmt::format("macro '{}' got multiple values for argument '{}'", def.name, name));
      frame_->set(name, std::move(value));
      bound[i] = true;
    } else if (name == "caller") {
      caller = std::move(value);
    } else {
      kwargs.set(Value::string(name), std::move(value));
    }
  }
  for (size_t i = 0; i < def.params.size(); ++i) {
    if (bound[i]) continue;
    if (def.defaults[i] != nullptr) {
      HEARTH_ASSIGN_OR_RETURN(Value v, eval(*def.defaults[i]));
      frame_->set(def.params[i], std::move(v));
    } else {
      frame_->set(def.params[i], Value::undefined(fmt::format("'{}' is undefined", def.params[i])));
    }
  }
  frame_->set("varargs", Value::tuple(std::move(varargs)));
  frame_->set("kwargs", Value::dict(std::move(kwargs)));
  if (!caller.is_undefined()) frame_->set("caller", std::move(caller));
  HEARTH_ASSIGN_OR_RETURN(std::string text, capture(def.body));
  return Value::string(std::move(text));
}

// ---- expressions ----------------------------------------------------------------------

Result<Value> Interpreter::eval(const Expr& e) {
  DepthGuard depth(eval_depth_);
  if (eval_depth_ > limits_.max_eval_depth) {
    return locate(exhausted("the template nested too deeply while rendering"), e.pos);
  }
  if (Status st = charge(1); !st.is_ok()) return locate(st, e.pos);
  auto result = eval_inner(e);
  if (!result.is_ok()) return locate(result.status(), e.pos);
  if (result->depth() > kMaxValueDepth) {
    return locate(type_error(fmt::format("value nested more than {} levels deep", kMaxValueDepth)), e.pos);
  }
  return result;
}

Result<CallArgs> Interpreter::eval_args(const Expr& e) {
  CallArgs args;
  const size_t n = e.operands.size();
  const size_t first_kw = n - e.kw_names.size();
  for (size_t i = Expr::kFirstArg; i < n; ++i) {
    HEARTH_ASSIGN_OR_RETURN(Value v, eval(*e.operands[i]));
    if (i < first_kw) {
      args.positional.push_back(std::move(v));
    } else {
      args.keyword.emplace_back(e.kw_names[i - first_kw], std::move(v));
    }
  }
  return args;
}

Result<Value> Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName:
      return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.operands.size());
      for (const ExprPtr& op : e.operands) {
        HEARTH_ASSIGN_OR_RETURN(Value v, eval(*op));
        items.push_back(std::move(v));
      }
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      DictObj d;
      for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
        HEARTH_ASSIGN_OR_RETURN(Value k, eval(*e.operands[i]));
        HEARTH_ASSIGN_OR_RETURN(Value v, eval(*e.operands[i + 1]));
        if (k.is_undefined()) return undefined_error(k);
        if (k.is_list() && !k.is_tuple()) return type_error("unhashable type: 'list'");
        if (k.is_dict()) return type_error("unhashable type: 'dict'");
        d.set(std::move(k), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      HEARTH_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0]));
      return get_attr(obj, e.name);
    }
    case ExprKind::kGetItem: {
      HEARTH_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0]));
      HEARTH_ASSIGN_OR_RETURN(Value key, eval(*e.operands[1]));
      return get_item(obj, key);
    }
    case ExprKind::kSlice:
      return eval_slice(e);
    case ExprKind::kUnary: {
      HEARTH_ASSIGN_OR_RETURN(Value v, eval(*e.operands[0]));
      if (e.op == Op::kNot) return Value::boolean(!v.truthy());
      if (v.is_undefined()) return undefined_error(v);
      if (v.is_float()) return Value::number(e.op == Op::kNeg ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        const int64_t i = v.to_int();
        if (e.op == Op::kPos) return Value::integer(i);
        if (i == INT64_MIN) return type_error("integer overflow");
        return Value::integer(-i);
      }
      return type_error(
          fmt::format("bad operand type for unary {}: '{}'", e.op == Op::kNeg ? "-" : "+", v.type_name()));
    }
    case ExprKind::kBinary: {
      HEARTH_ASSIGN_OR_RETURN(Value a, eval(*e.operands[0]));
      HEARTH_ASSIGN_OR_RETURN(Value b, eval(*e.operands[1]));
      return eval_binary(e.op, a, b);
    }
    case ExprKind::kAnd: {
      HEARTH_ASSIGN_OR_RETURN(Value a, eval(*e.operands[0]));
      if (!a.truthy()) return a;
      return eval(*e.operands[1]);
    }
    case ExprKind::kOr: {
      HEARTH_ASSIGN_OR_RETURN(Value a, eval(*e.operands[0]));
      if (a.truthy()) return a;
      return eval(*e.operands[1]);
    }
    case ExprKind::kCompare: {
      HEARTH_ASSIGN_OR_RETURN(Value left, eval(*e.operands[0]));
      for (size_t i = 0; i < e.ops.size(); ++i) {
        HEARTH_ASSIGN_OR_RETURN(Value right, eval(*e.operands[i + 1]));
        HEARTH_ASSIGN_OR_RETURN(bool ok, eval_compare(e.ops[i], left, right));
        if (!ok) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::kCondition: {
      HEARTH_ASSIGN_OR_RETURN(Value cond, eval(*e.operands[1]));
      if (cond.truthy()) return eval(*e.operands[0]);
      if (e.operands[2] != nullptr) return eval(*e.operands[2]);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined", e.pos.line));
    }
    case ExprKind::kCall: {
      HEARTH_ASSIGN_OR_RETURN(Value callee, eval(*e.operands[0]));
      HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
      return call(callee, args);
    }
    case ExprKind::kFilter: {
      if (e.operands[0] == nullptr) return Status(ErrorCode::kInternal, "filter without a subject");
      HEARTH_ASSIGN_OR_RETURN(Value subject, eval(*e.operands[0]));
      HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
      return apply_filter(*this, e.name, subject, args);
    }
    case ExprKind::kTest: {
      HEARTH_ASSIGN_OR_RETURN(Value subject, eval(*e.operands[0]));
      HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
      HEARTH_ASSIGN_OR_RETURN(bool result, apply_test(*this, e.name, subject, args));
      return Value::boolean(result != e.negated);
    }
  }
  return Status(ErrorCode::kInternal, "unknown expression");
}

Result<Value> Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_function()) return callee.as_function().fn(*this, args);
  if (callee.is_undefined()) return undefined_error(callee);
  return type_error(fmt::format("'{}' object is not callable", callee.type_name()));
}

Result<Value> Interpreter::get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return undefined_error(obj);
    case Value::Kind::kNamespace:
      if (const Value* v = obj.as_namespace().attrs.find(name)) return *v;
      return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
    case Value::Kind::kDict:
      if (auto method = get_method(obj, name)) return std::move(*method);
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return missing_attribute(obj, name);
    default:
      if (auto method = get_method(obj, name)) return std::move(*method);
      return missing_attribute(obj, name);
  }
}

Result<Value> Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return undefined_error(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if (obj.is_list() && (key.is_int() || key.is_bool())) {
    const auto& items = obj.as_list().items;
    int64_t i = key.to_int();
    const auto n = static_cast<int64_t>(items.size());
    if (i < 0) i += n;
    if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
  } else if (obj.is_string() && (key.is_int() || key.is_bool())) {
    if (auto ch = string_at(obj.as_string(), key.to_int())) return Value::string(std::move(*ch));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return missing_element(obj, key);
}

Result<std::vector<Value>> Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kList:
      HEARTH_RETURN_IF_ERROR(charge_bytes(v.as_list().items.size() * 8));
      return v.as_list().items;
    case Value::Kind::kDict: {
      HEARTH_RETURN_IF_ERROR(charge_bytes(v.as_dict().entries.size() * 8));
      std::vector<Value> keys;
      keys.reserve(v.as_dict().entries.size());
      for (const auto& [k, value] : v.as_dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      const std::string& s = v.as_string();
      HEARTH_RETURN_IF_ERROR(charge_bytes(s.size() * 8));
      std::vector<Value> chars;
      size_t pos = 0;
      while (pos < s.size()) {
        const size_t start = pos;
        utf8_next(s, pos);
        chars.push_back(Value::string(s.substr(start, pos - start)));
      }
      return chars;
    }
    default:
      return type_error(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

Result<Value> Interpreter::eval_slice(const Expr& e) {
  HEARTH_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0]));
  SliceSpec spec;
  for (int i = 0; i < 3; ++i) {
    const ExprPtr& bound = e.operands[static_cast<size_t>(i) + 1];
    if (bound == nullptr) continue;
    HEARTH_ASSIGN_OR_RETURN(Value v, eval(*bound));
    if (v.is_none()) continue;
    if (v.is_undefined()) return undefined_error(v);
    if (!v.is_int() && !v.is_bool()) return type_error("slice indices must be integers or None");
    if (i == 0) {
      spec.has_start = true;
      spec.start = v.to_int();
    } else if (i == 1) {
      spec.has_stop = true;
      spec.stop = v.to_int();
    } else {
      spec.step = v.to_int();
    }
  }
  if (obj.is_undefined()) return undefined_error(obj);
  if (obj.is_list()) {
    const auto& items = obj.as_list().items;
    HEARTH_ASSIGN_OR_RETURN(SliceRange range, slice_range(items.size(), spec));
    HEARTH_RETURN_IF_ERROR(charge_bytes(range.count * 8));
    std::vector<Value> out;
    out.reserve(range.count);
    for (size_t k = 0; k < range.count; ++k) {
      out.push_back(items[static_cast<size_t>(range.start + static_cast<int64_t>(k) * range.step)]);
    }
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    const bool ascii = is_ascii(s);
    std::vector<size_t> offsets;
    if (!ascii) offsets = utf8_offsets(s);
    const size_t length = ascii ? s.size() : offsets.size() - 1;
    HEARTH_ASSIGN_OR_RETURN(SliceRange range, slice_range(length, spec));
    std::string out;
    if (range.step == 1 && range.count > 0) {
      const auto first = static_cast<size_t>(range.start);
      const size_t begin = ascii ? first : offsets[first];
      const size_t end = ascii ? first + range.count : offsets[first + range.count];
      HEARTH_RETURN_IF_ERROR(charge_bytes(end - begin));
      out.assign(s, begin, end - begin);
      return Value::string(std::move(out));
    }
    HEARTH_RETURN_IF_ERROR(charge_bytes(range.count * 4));
    for (size_t k = 0; k < range.count; ++k) {
      const auto i = static_cast<size_t>(range.start + static_cast<int64_t>(k) * range.step);
      if (ascii) {
        out += s[i];
      } else {
        out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
      }
    }
    return Value::string(std::move(out));
  }
  if (obj.is_dict()) return type_error("unhashable type: 'slice'");
  return type_error(fmt::format("'{}' object is not subscriptable", obj.type_name()));
}

Result<bool> Interpreter::eval_compare(Op op, const Value& a, const Value& b) {
  switch (op) {
    case Op::kEq:
      return values_equal(a, b);
    case Op::kNe:
      return !values_equal(a, b);
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe: {
      HEARTH_ASSIGN_OR_RETURN(int c, values_compare(a, b));
      if (op == Op::kLt) return c < 0;
      if (op == Op::kLe) return c <= 0;
      if (op == Op::kGt) return c > 0;
      return c >= 0;
    }
    case Op::kIn:
    case Op::kNotIn: {
      bool found = false;
      switch (b.kind()) {
        case Value::Kind::kUndefined:
          break;
        case Value::Kind::kString:
          if (!a.is_string()) {
            if (a.is_undefined()) return undefined_error(a);
            return type_error(fmt::format("'in <string>' requires string as left operand, not {}", a.type_name()));
          }
          found = b.as_string().find(a.as_string()) != std::string::npos;
          break;
        case Value::Kind::kList:
          HEARTH_RETURN_IF_ERROR(charge(b.as_list().items.size() / 16));
          found = std::any_of(b.as_list().items.begin(), b.as_list().items.end(),
                              [&](const Value& item) { return values_equal(item, a); });
          break;
        case Value::Kind::kDict:
          if ((a.is_list() && !a.is_tuple()) || a.is_dict()) {
            return type_error(fmt::format("unhashable type: '{}'", a.type_name()));
          }
          HEARTH_RETURN_IF_ERROR(charge(b.as_dict().entries.size() / 16));
          found = b.as_dict().find(a) != nullptr;
          break;
        default:
          return type_error(fmt::format("argument of type '{}' is not iterable", b.type_name()));
      }
      return op == Op::kIn ? found : !found;
    }
    default:
      return Status(ErrorCode::kInternal, "not a comparison");
  }
}

Result<Value> Interpreter::eval_binary(Op op, const Value& a, const Value& b) {
  if (op == Op::kConcat) {
    HEARTH_ASSIGN_OR_RETURN(std::string left, value_to_str(a));
    HEARTH_ASSIGN_OR_RETURN(std::string right, value_to_str(b));
    HEARTH_RETURN_IF_ERROR(charge_bytes(left.size() + right.size()));
    return Value::string(left + right);
  }
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  switch (op) {
    case Op::kAdd:
      if (floats) return Value::number(a.to_double() + b.to_double());
      if (numbers) {
        int64_t r;
        if (__builtin_add_overflow(a.to_int(), b.to_int(), &r)) return type_error("integer overflow");
        return Value::integer(r);
      }
      if (a.is_string() && b.is_string()) {
        HEARTH_RETURN_IF_ERROR(charge_bytes(a.as_string().size() + b.as_string().size()));
        return Value::string(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        const auto& x = a.as_list().items;
        const auto& y = b.as_list().items;
        HEARTH_RETURN_IF_ERROR(charge_bytes((x.size() + y.size()) * 8));
        std::vector<Value> items;
        items.reserve(x.size() + y.size());
        items.insert(items.end(), x.begin(), x.end());
        items.insert(items.end(), y.begin(), y.end());
        return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      if (a.is_string() && !b.is_string() && !b.is_undefined()) {
        return type_error(fmt::format("can only concatenate str (not \"{}\") to str", b.type_name()));
      }
      return operand_error("+", a, b);
    case Op::kSub:
      if (floats) return Value::number(a.to_double() - b.to_double());
      if (numbers) {
        int64_t r;
        if (__builtin_sub_overflow(a.to_int(), b.to_int(), &r)) return type_error("integer overflow");
        return Value::integer(r);
      }
      return operand_error("-", a, b);
    case Op::kMul: {
      if (floats) return Value::number(a.to_double() * b.to_double());
      if (numbers) {
        int64_t r;
        if (__builtin_mul_overflow(a.to_int(), b.to_int(), &r)) return type_error("integer overflow");
        return Value::integer(r);
      }
      const Value* seq = nullptr;
      const Value* count = nullptr;
      if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) {
        seq = &a;
        count = &b;
      } else if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) {
        seq = &b;
        count = &a;
      }
      if (seq == nullptr) return operand_error("*", a, b);
      const int64_t times = std::max<int64_t>(count->to_int(), 0);
      if (seq->is_string()) {
        const std::string& s = seq->as_string();
        if (times > 0 && s.size() > limits_.max_output_bytes / static_cast<uint64_t>(times)) {
          return charge_bytes(limits_.max_output_bytes + 1);
        }
        HEARTH_RETURN_IF_ERROR(charge_bytes(s.size() * static_cast<size_t>(times)));
        std::string out;
        out.reserve(s.size() * static_cast<size_t>(times));
        for (int64_t i = 0; i < times; ++i) out += s;
        return Value::string(std::move(out));
      }
      const auto& items = seq->as_list().items;
      if (times > 0 && items.size() * 8 > limits_.max_output_bytes / static_cast<uint64_t>(times)) {
        return charge_bytes(limits_.max_output_bytes + 1);
      }
      HEARTH_RETURN_IF_ERROR(charge_bytes(items.size() * 8 * static_cast<size_t>(times)));
      std::vector<Value> out;
      out.reserve(items.size() * static_cast<size_t>(times));
      for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
      return seq->is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    case Op::kDiv:
      if (!numbers) return operand_error("/", a, b);
      if (b.to_double() == 0.0) return type_error("division by zero");
      return Value::number(a.to_double() / b.to_double());
    case Op::kFloorDiv:
      if (!numbers) return operand_error("//", a, b);
      if (floats) {
        if (b.to_double() == 0.0) return type_error("float floor division by zero");
        return Value::number(std::floor(a.to_double() / b.to_double()));
      }
      if (b.to_int() == 0) return type_error("integer division or modulo by zero");
      if (a.to_int() == INT64_MIN && b.to_int() == -1) return type_error("integer overflow");
      return Value::integer(floor_div(a.to_int(), b.to_int()));
    case Op::kMod:
      if (a.is_string()) {
        HEARTH_ASSIGN_OR_RETURN(std::string text, percent_format(*this, a.as_string(), b));
        return Value::string(std::move(text));
      }
      if (!numbers) return operand_error("%", a, b);
      if (floats) {
        const double y = b.to_double();
        if (y == 0.0) return type_error("float modulo");
        double r = std::fmod(a.to_double(), y);
        if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
        return Value::number(r);
      }
      if (b.to_int() == 0) return type_error("integer division or modulo by zero");
      if (b.to_int() == -1) return Value::integer(0);
      return Value::integer(floor_mod(a.to_int(), b.to_int()));
    case Op::kPow: {
      if (!numbers) return operand_error("**", a, b);
      if (!floats && b.to_int() >= 0) {
        int64_t base = a.to_int(), exp = b.to_int(), result = 1;
        while (exp > 0) {
          if (exp & 1) {
            if (__builtin_mul_overflow(result, base, &result)) return type_error("integer overflow");
          }
          exp >>= 1;
          if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return type_error("integer overflow");
        }
        return Value::integer(result);
      }
      const double x = a.to_double(), y = b.to_double();
      if (x == 0.0 && y < 0) return type_error("0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y)) return type_error("fractional power of a negative number");
      return Value::number(std::pow(x, y));
    }
    default:
      return type_error(fmt::format("unsupported operator {}", op_symbol(op)));
  }
}

}  // namespace hearth::jinja
