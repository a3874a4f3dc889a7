// Syntax tree of a parsed chat template (internal to chat/). Built once by
// jinja_parse(), then only read: a Template is immutable and may be rendered from many
// threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/jinja_lexer.h"
#include "chat/jinja_value.h"

namespace hearth::jinja {

enum class ExprKind : uint8_t {
  kLiteral,    // literal
  kName,       // name
  kList,       // operands: items
  kTuple,      // operands: items
  kDict,       // operands: key0, value0, key1, value1, ...
  kGetAttr,    // operands[0].name (also `x.0`, which indexes)
  kGetItem,    // operands[0][operands[1]]
  kSlice,      // operands[0][operands[1]:operands[2]:operands[3]], each bound may be null
  kUnary,      // op operands[0]: kNeg, kPos, kNot
  kBinary,     // operands[0] op operands[1]: arithmetic and ~
  kAnd,        // operands[0] and operands[1]
  kOr,         // operands[0] or operands[1]
  kCompare,    // operands[0] ops[0] operands[1] ops[1] operands[2] ... (chained)
  kCondition,  // operands[0] if operands[1] else operands[2] (else may be null)
  kCall,       // operands[0](args)
  kFilter,     // operands[0] | name(args); operands[0] is null in filter blocks
  kTest,       // operands[0] is [not] name(args)
};

enum class Op : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kMod,
  kPow,
  kConcat,
  kNeg,
  kPos,
  kNot,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kIn,
  kNotIn,
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  SourcePos pos;
  Op op = Op::kAdd;
  bool negated = false;  // kTest: `is not`
  int depth = 1;         // 1 + the deepest operand
  Value literal;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<Op> ops;  // kCompare
  // kCall, kFilter, kTest: operands after the subject are the positional arguments, then
  // the keyword arguments, named here in order (the last kw_names.size() operands).
  std::vector<std::string> kw_names;
  // Index of the first argument operand: 1 for calls, filters and tests.
  static constexpr size_t kFirstArg = 1;
};

// What `{% for %}`, `{% set %}` and `{% with %}` assign to.
struct Target {
  enum class Kind : uint8_t { kName, kAttr, kTuple };
  Kind kind = Kind::kName;
  std::string name;           // kName, kAttr: the variable
  std::string attr;           // kAttr: `ns.attr`
  std::vector<Target> items;  // kTuple
  SourcePos pos;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when it has none
  Body body;
  SourcePos pos;
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // conditions[i] -> bodies[i]; bodies has one more entry for else
  kFor,          // for target in expr [if conditions[0]]: bodies[0], else bodies[1]
  kSet,          // set target = expr
  kSetBlock,     // set target [| filters] %} bodies[0] {% endset
  kMacro,        // macro
  kCallBlock,    // call[(macro->params)] expr %} macro->body {% endcall
  kFilterBlock,  // filter filters %} bodies[0] {% endfilter
  kWith,         // with targets = values %} bodies[0] {% endwith
  kBreak,
  kContinue,
  kScope,  // bodies[0], in the same scope ({% generation %})
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Target target;
  std::vector<ExprPtr> filters;  // kFilter expressions with a null subject
  std::shared_ptr<const MacroDef> macro;
  std::vector<Target> with_targets;
  std::vector<ExprPtr> with_values;
  bool uses_loop = true;  // kFor: whether anything inside reads `loop` (else it is not built)
};

struct Template {
  Body body;
};

}  // namespace hearth::jinja
