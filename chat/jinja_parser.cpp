#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "chat/jinja_builtins.h"

namespace hearth::jinja {
namespace {

bool is_constant_name(std::string_view name) {
  return name == "true" || name == "false" || name == "True" || name == "False" || name == "none" || name == "None";
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText:
      return "template data";
    case TokenKind::kVarBegin:
      return "'{{'";
    case TokenKind::kVarEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kName:
      return "'" + t.text + "'";
    case TokenKind::kString:
      return "string literal";
    case TokenKind::kInt:
    case TokenKind::kFloat:
      return "number '" + t.text + "'";
    case TokenKind::kOp:
      return "'" + t.text + "'";
    case TokenKind::kEof:
      return "end of template";
  }
  return "token";
}

bool mentions_name(const Body& body, std::string_view name);

bool mentions_name(const Expr* e, std::string_view name) {
  if (e == nullptr) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  return std::any_of(e->operands.begin(), e->operands.end(),
                     [&](const ExprPtr& op) { return mentions_name(op.get(), name); });
}

bool mentions_name(const Stmt& s, std::string_view name) {
  auto any_expr = [&](const std::vector<ExprPtr>& exprs) {
    return std::any_of(exprs.begin(), exprs.end(), [&](const ExprPtr& e) { return mentions_name(e.get(), name); });
  };
  if (mentions_name(s.expr.get(), name) || any_expr(s.conditions) || any_expr(s.filters) || any_expr(s.with_values)) {
    return true;
  }
  if (std::any_of(s.bodies.begin(), s.bodies.end(), [&](const Body& b) { return mentions_name(b, name); })) {
    return true;
  }
  return s.macro != nullptr && (mentions_name(s.macro->body, name) || any_expr(s.macro->defaults));
}

bool mentions_name(const Body& body, std::string_view name) {
  return std::any_of(body.begin(), body.end(), [&](const StmtPtr& s) { return mentions_name(*s, name); });
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<std::shared_ptr<const Template>> run() {
    auto tmpl = std::make_shared<Template>();
    HEARTH_ASSIGN_OR_RETURN(tmpl->body, parse_body({}, nullptr));
    return std::shared_ptr<const Template>(std::move(tmpl));
  }

 private:
  // An open block, for the message when its end tag never comes.
  struct OpenBlock {
    std::string_view tag;
    SourcePos pos;
  };

  // Counts recursion; the parser refuses input nested deeper than kMaxParseNesting.
  class NestingGuard {
   public:
    explicit NestingGuard(int& depth) : depth_(depth) { ++depth_; }
    ~NestingGuard() { --depth_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;
    bool too_deep() const { return depth_ > kMaxParseNesting; }

   private:
    int& depth_;
  };

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::kOp && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().kind == TokenKind::kName && cur().text == name; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  Status error(std::string_view message) const { return error_at(cur().pos, message); }
  static Status error_at(SourcePos pos, std::string_view message) {
    return template_error(ErrorCode::kInvalidArgument, pos, message);
  }
  static Status unsupported_at(SourcePos pos, std::string_view message) {
    return template_error(ErrorCode::kUnsupported, pos, message);
  }
  Status unexpected(std::string_view wanted) const {
    return error(fmt::format("expected {}, got {}", wanted, describe(cur())));
  }
  Status too_deep() const { return error("template nested too deeply"); }

  Status expect_op(std::string_view op) {
    if (!skip_op(op)) return unexpected(fmt::format("'{}'", op));
    return Status::ok();
  }
  Status expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) return unexpected("end of tag '%}'");
    advance();
    return Status::ok();
  }
  Result<std::string> expect_name() {
    if (cur().kind != TokenKind::kName) return unexpected("a name");
    std::string name = cur().text;
    advance();
    return name;
  }

  static ExprPtr make(ExprKind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  // Sets the node's depth from its operands; refuses trees deeper than kMaxExprDepth.
  Result<ExprPtr> finish(ExprPtr e) const {
    int depth = 0;
    for (const auto& op : e->operands) {
      if (op) depth = std::max(depth, op->depth);
    }
    e->depth = depth + 1;
    if (e->depth > kMaxExprDepth) return error_at(e->pos, "expression nested too deeply");
    return e;
  }
  Result<ExprPtr> binary(ExprKind kind, Op op, ExprPtr left, ExprPtr right, SourcePos pos) const {
    auto e = make(kind, pos);
    e->op = op;
    e->operands.push_back(std::move(left));
    e->operands.push_back(std::move(right));
    return finish(std::move(e));
  }

  // ---- statements -------------------------------------------------------------------

  // Parses until a block tag named in `ends` (left unconsumed, at its '{%') or the end
  // of the template, which is an error when `open` is set.
  Result<Body> parse_body(std::initializer_list<std::string_view> ends, const OpenBlock* open) {
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case TokenKind::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kText;
          s->pos = t.pos;
          s->text = t.text;
          body.push_back(std::move(s));
          advance();
          break;
        }
        case TokenKind::kVarBegin: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kOutput;
          s->pos = t.pos;
          advance();
          HEARTH_ASSIGN_OR_RETURN(s->expr, parse_tuple(true, {}, false));
          if (cur().kind != TokenKind::kVarEnd) return unexpected("end of print statement '}}'");
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = peek();
          if (name.kind == TokenKind::kName &&
              std::find(ends.begin(), ends.end(), std::string_view(name.text)) != ends.end()) {
            return body;
          }
          advance();
          HEARTH_ASSIGN_OR_RETURN(StmtPtr s, parse_statement(t.pos, open));
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kEof:
          if (open != nullptr) {
            return error(fmt::format("unexpected end of template: '{}' opened at {}:{} is not closed", open->tag,
                                     open->pos.line, open->pos.column));
          }
          return body;
        default:
          return unexpected("template data or a tag");
      }
    }
  }

  // After the '{%' and the end tag's name: consumes `{% name %}` (the name must be `tag`).
  Status expect_end_tag(std::string_view tag) {
    advance();  // '{%'
    if (!skip_name(tag)) return unexpected(fmt::format("'{}'", tag));
    return expect_block_end();
  }

  Result<StmtPtr> parse_statement(SourcePos pos, const OpenBlock* open) {
    NestingGuard guard(nesting_);
    if (guard.too_deep()) return too_deep();
    if (cur().kind != TokenKind::kName) return unexpected("a tag name");
    const std::string tag = cur().text;
    const SourcePos tag_pos = cur().pos;
    advance();
    if (tag == "for") return parse_for(pos);
    if (tag == "if") return parse_if(pos);
    if (tag == "set") return parse_set(pos);
    if (tag == "macro") return parse_macro(pos);
    if (tag == "call") return parse_call_block(pos);
    if (tag == "filter") return parse_filter_block(pos);
    if (tag == "with") return parse_with(pos);
    if (tag == "generation") return parse_scope(pos, "generation", "endgeneration");
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return error_at(tag_pos, fmt::format("'{}' outside of a loop", tag));
      auto s = std::make_unique<Stmt>();
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      s->pos = pos;
      HEARTH_RETURN_IF_ERROR(expect_block_end());
      return s;
    }
    static constexpr std::string_view kUnsupportedTags[] = {"extends",    "include", "import", "from", "block",
                                                            "autoescape", "do",      "trans",  "raw"};
    if (std::find(std::begin(kUnsupportedTags), std::end(kUnsupportedTags), tag) != std::end(kUnsupportedTags)) {
      return unsupported_at(tag_pos, fmt::format("the '{}' tag is not supported", tag));
    }
    if (open != nullptr) {
      return error_at(tag_pos, fmt::format("unexpected tag '{}' inside '{}' opened at {}:{}", tag, open->tag,
                                           open->pos.line, open->pos.column));
    }
    return error_at(tag_pos, fmt::format("unknown or unexpected tag '{}'", tag));
  }

  Result<StmtPtr> parse_for(SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kFor;
    s->pos = pos;
    HEARTH_ASSIGN_OR_RETURN(s->target, parse_target(/*allow_attr=*/false));
    if (!skip_name("in")) return unexpected("'in'");
    HEARTH_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, {"recursive"}, false));
    if (is_name("recursive")) return unsupported_at(cur().pos, "recursive loops are not supported");
    if (skip_name("if")) {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr cond, parse_expression(true));
      s->conditions.push_back(std::move(cond));
    }
    HEARTH_RETURN_IF_ERROR(expect_block_end());
    const OpenBlock open{"for", pos};
    ++loop_depth_;
    auto body = parse_body({"endfor", "else"}, &open);
    --loop_depth_;
    if (!body.is_ok()) return body.status();
    s->bodies.push_back(std::move(body).value());
    if (peek().text == "else") {
      advance();
      advance();
      HEARTH_RETURN_IF_ERROR(expect_block_end());
      HEARTH_ASSIGN_OR_RETURN(Body else_body, parse_body({"endfor"}, &open));
      s->bodies.push_back(std::move(else_body));
    }
    HEARTH_RETURN_IF_ERROR(expect_end_tag("endfor"));
    s->uses_loop =
        std::any_of(s->bodies.begin(), s->bodies.end(), [](const Body& b) { return mentions_name(b, "loop"); });
    return s;
  }

  Result<StmtPtr> parse_if(SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kIf;
    s->pos = pos;
    const OpenBlock open{"if", pos};
    while (true) {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr cond, parse_tuple(false, {}, false));
      s->conditions.push_back(std::move(cond));
      HEARTH_RETURN_IF_ERROR(expect_block_end());
      HEARTH_ASSIGN_OR_RETURN(Body body, parse_body({"elif", "else", "endif"}, &open));
      s->bodies.push_back(std::move(body));
      const std::string next = peek().text;
      if (next == "elif") {
        advance();
        advance();
        continue;
      }
      if (next == "else") {
        advance();
        advance();
        HEARTH_RETURN_IF_ERROR(expect_block_end());
        HEARTH_ASSIGN_OR_RETURN(Body else_body, parse_body({"endif"}, &open));
        s->bodies.push_back(std::move(else_body));
      }
      break;
    }
    HEARTH_RETURN_IF_ERROR(expect_end_tag("endif"));
    return s;
  }

  Result<StmtPtr> parse_set(SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->pos = pos;
    HEARTH_ASSIGN_OR_RETURN(s->target, parse_target(/*allow_attr=*/true));
    if (skip_op("=")) {
      s->kind = StmtKind::kSet;
      HEARTH_ASSIGN_OR_RETURN(s->expr, parse_tuple(true, {}, false));
      HEARTH_RETURN_IF_ERROR(expect_block_end());
      return s;
    }
    if (s->target.kind == Target::Kind::kTuple) return unexpected("'='");
    s->kind = StmtKind::kSetBlock;
    while (is_op("|")) {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr f, parse_filter(nullptr));
      s->filters.push_back(std::move(f));
    }
    HEARTH_RETURN_IF_ERROR(expect_block_end());
    const OpenBlock open{"set", pos};
    HEARTH_ASSIGN_OR_RETURN(Body body, parse_body({"endset"}, &open));
    s->bodies.push_back(std::move(body));
    HEARTH_RETURN_IF_ERROR(expect_end_tag("endset"));
    return s;
  }

  // `(a, b=default, ...)` of a macro or call block.
  Status parse_params(MacroDef& def) {
    HEARTH_RETURN_IF_ERROR(expect_op("("));
    while (!is_op(")")) {
      if (!def.params.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      if (is_op(")")) break;
      const SourcePos pos = cur().pos;
      HEARTH_ASSIGN_OR_RETURN(std::string name, expect_name());
      if (is_constant_name(name)) return error_at(pos, fmt::format("cannot use '{}' as a parameter", name));
      ExprPtr def_value;
      if (skip_op("=")) {
        HEARTH_ASSIGN_OR_RETURN(def_value, parse_expression(true));
      } else if (std::any_of(def.defaults.begin(), def.defaults.end(), [](const ExprPtr& d) { return d != nullptr; })) {
        return error_at(pos, "parameter without a default follows parameters with defaults");
      }
      def.params.push_back(std::move(name));
      def.defaults.push_back(std::move(def_value));
    }
    return expect_op(")");
  }

  // A macro body is its own scope: loop controls of an enclosing loop do not reach in.
  Result<Body> parse_macro_body(std::string_view end, const OpenBlock& open) {
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    auto body = parse_body({end}, &open);
    loop_depth_ = saved_loops;
    return body;
  }

  Result<StmtPtr> parse_macro(SourcePos pos) {
    auto def = std::make_shared<MacroDef>();
    def->pos = pos;
    const SourcePos name_pos = cur().pos;
    HEARTH_ASSIGN_OR_RETURN(def->name, expect_name());
    if (is_constant_name(def->name)) return error_at(name_pos, "a macro cannot be named like a constant");
    HEARTH_RETURN_IF_ERROR(parse_params(*def));
    HEARTH_RETURN_IF_ERROR(expect_block_end());
    const OpenBlock open{"macro", pos};
    HEARTH_ASSIGN_OR_RETURN(def->body, parse_macro_body("endmacro", open));
    HEARTH_RETURN_IF_ERROR(expect_end_tag("endmacro"));
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kMacro;
    s->pos = pos;
    s->macro = std::move(def);
    return s;
  }

  Result<StmtPtr> parse_call_block(SourcePos pos) {
    auto def = std::make_shared<MacroDef>();
    def->name = "caller";
    def->pos = pos;
    if (is_op("(")) HEARTH_RETURN_IF_ERROR(parse_params(*def));
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kCallBlock;
    s->pos = pos;
    HEARTH_ASSIGN_OR_RETURN(s->expr, parse_expression(true));
    if (s->expr->kind != ExprKind::kCall) return error_at(s->expr->pos, "a call block needs a call expression");
    HEARTH_RETURN_IF_ERROR(expect_block_end());
    const OpenBlock open{"call", pos};
    HEARTH_ASSIGN_OR_RETURN(def->body, parse_macro_body("endcall", open));
    HEARTH_RETURN_IF_ERROR(expect_end_tag("endcall"));
    s->macro = std::move(def);
    return s;
  }

  Result<StmtPtr> parse_filter_block(SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kFilterBlock;
    s->pos = pos;
    do {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr f, parse_filter_chain_item());
      s->filters.push_back(std::move(f));
    } while (skip_op("|"));
    HEARTH_RETURN_IF_ERROR(expect_block_end());
    const OpenBlock open{"filter", pos};
    HEARTH_ASSIGN_OR_RETURN(Body body, parse_body({"endfilter"}, &open));
    s->bodies.push_back(std::move(body));
    HEARTH_RETURN_IF_ERROR(expect_end_tag("endfilter"));
    return s;
  }

  Result<StmtPtr> parse_with(SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kWith;
    s->pos = pos;
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s->with_targets.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      HEARTH_ASSIGN_OR_RETURN(Target target, parse_target(/*allow_attr=*/false));
      HEARTH_RETURN_IF_ERROR(expect_op("="));
      HEARTH_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      s->with_targets.push_back(std::move(target));
      s->with_values.push_back(std::move(value));
    }
    HEARTH_RETURN_IF_ERROR(expect_block_end());
    const OpenBlock open{"with", pos};
    HEARTH_ASSIGN_OR_RETURN(Body body, parse_body({"endwith"}, &open));
    s->bodies.push_back(std::move(body));
    HEARTH_RETURN_IF_ERROR(expect_end_tag("endwith"));
    return s;
  }

  Result<StmtPtr> parse_scope(SourcePos pos, std::string_view tag, std::string_view end) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kScope;
    s->pos = pos;
    HEARTH_RETURN_IF_ERROR(expect_block_end());
    const OpenBlock open{tag, pos};
    HEARTH_ASSIGN_OR_RETURN(Body body, parse_body({end}, &open));
    s->bodies.push_back(std::move(body));
    HEARTH_RETURN_IF_ERROR(expect_end_tag(end));
    return s;
  }

  // ---- assignment targets -----------------------------------------------------------

  bool at_target_end() const {
    return cur().kind == TokenKind::kBlockEnd || is_name("in") || is_op("=") || is_op("|") || is_op(")");
  }

  Result<Target> parse_target(bool allow_attr) {
    HEARTH_ASSIGN_OR_RETURN(Target first, parse_target_item(allow_attr));
    if (!is_op(",")) return first;
    Target tuple;
    tuple.kind = Target::Kind::kTuple;
    tuple.pos = first.pos;
    if (first.kind == Target::Kind::kAttr) return error_at(first.pos, "cannot unpack into a namespace attribute");
    tuple.items.push_back(std::move(first));
    while (skip_op(",")) {
      if (at_target_end()) break;
      HEARTH_ASSIGN_OR_RETURN(Target item, parse_target_item(false));
      tuple.items.push_back(std::move(item));
    }
    return tuple;
  }

  Result<Target> parse_target_item(bool allow_attr) {
    NestingGuard guard(nesting_);
    if (guard.too_deep()) return too_deep();
    Target t;
    t.pos = cur().pos;
    if (skip_op("(")) {
      HEARTH_ASSIGN_OR_RETURN(t, parse_target(false));
      HEARTH_RETURN_IF_ERROR(expect_op(")"));
      return t;
    }
    if (cur().kind != TokenKind::kName) return unexpected("a name to assign to");
    t.name = cur().text;
    if (is_constant_name(t.name)) return error(fmt::format("cannot assign to '{}'", t.name));
    advance();
    if (allow_attr && skip_op(".")) {
      t.kind = Target::Kind::kAttr;
      HEARTH_ASSIGN_OR_RETURN(t.attr, expect_name());
    }
    return t;
  }

  // ---- expressions ------------------------------------------------------------------

  bool at_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    if (cur().kind == TokenKind::kVarEnd || cur().kind == TokenKind::kBlockEnd || is_op(")")) return true;
    for (std::string_view name : extra_end) {
      if (is_name(name)) return true;
    }
    return false;
  }

  // Comma-separated expressions: one is itself, several (or a trailing comma) a tuple.
  Result<ExprPtr> parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                              bool explicit_parens) {
    const SourcePos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      if (at_tuple_end(extra_end)) break;
      HEARTH_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(with_condexpr));
      items.push_back(std::move(item));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return unexpected("an expression");
    }
    auto e = make(ExprKind::kTuple, pos);
    e->operands = std::move(items);
    return finish(std::move(e));
  }

  Result<ExprPtr> parse_expression(bool with_condexpr) {
    NestingGuard guard(nesting_);
    if (guard.too_deep()) return too_deep();
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  Result<ExprPtr> parse_condexpr() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr expr, parse_or());
    while (is_name("if")) {
      const SourcePos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr cond, parse_or());
      ExprPtr otherwise;
      if (skip_name("else")) {
        NestingGuard guard(nesting_);
        if (guard.too_deep()) return too_deep();
        HEARTH_ASSIGN_OR_RETURN(otherwise, parse_condexpr());
      }
      auto e = make(ExprKind::kCondition, pos);
      e->operands.push_back(std::move(expr));
      e->operands.push_back(std::move(cond));
      e->operands.push_back(std::move(otherwise));
      HEARTH_ASSIGN_OR_RETURN(expr, finish(std::move(e)));
    }
    return expr;
  }

  Result<ExprPtr> parse_or() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
    while (is_name("or")) {
      const SourcePos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_and());
      HEARTH_ASSIGN_OR_RETURN(left, binary(ExprKind::kOr, Op::kAdd, std::move(left), std::move(right), pos));
    }
    return left;
  }

  Result<ExprPtr> parse_and() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
    while (is_name("and")) {
      const SourcePos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_not());
      HEARTH_ASSIGN_OR_RETURN(left, binary(ExprKind::kAnd, Op::kAdd, std::move(left), std::move(right), pos));
    }
    return left;
  }

  Result<ExprPtr> parse_not() {
    if (is_name("not")) {
      NestingGuard guard(nesting_);
      if (guard.too_deep()) return too_deep();
      const SourcePos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
      auto e = make(ExprKind::kUnary, pos);
      e->op = Op::kNot;
      e->operands.push_back(std::move(operand));
      return finish(std::move(e));
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    const SourcePos pos = cur().pos;
    HEARTH_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
    std::vector<Op> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      Op op;
      if (is_op("==")) {
        op = Op::kEq;
      } else if (is_op("!=")) {
        op = Op::kNe;
      } else if (is_op("<")) {
        op = Op::kLt;
      } else if (is_op("<=")) {
        op = Op::kLe;
      } else if (is_op(">")) {
        op = Op::kGt;
      } else if (is_op(">=")) {
        op = Op::kGe;
      } else if (is_name("in")) {
        op = Op::kIn;
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        advance();
        op = Op::kNotIn;
      } else {
        break;
      }
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math1());
      ops.push_back(op);
      operands.push_back(std::move(rhs));
    }
    if (ops.empty()) return first;
    auto e = make(ExprKind::kCompare, pos);
    e->operands.push_back(std::move(first));
    for (auto& operand : operands) e->operands.push_back(std::move(operand));
    e->ops = std::move(ops);
    return finish(std::move(e));
  }

  Result<ExprPtr> parse_math1() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
    while (is_op("+") || is_op("-")) {
      const Op op = is_op("+") ? Op::kAdd : Op::kSub;
      const SourcePos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
      HEARTH_ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, op, std::move(left), std::move(right), pos));
    }
    return left;
  }

  Result<ExprPtr> parse_concat() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_math2());
    while (is_op("~")) {
      const SourcePos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_math2());
      HEARTH_ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, Op::kConcat, std::move(left), std::move(right), pos));
    }
    return left;
  }

  Result<ExprPtr> parse_math2() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Op op = is_op("*") ? Op::kMul : is_op("/") ? Op::kDiv : is_op("//") ? Op::kFloorDiv : Op::kMod;
      const SourcePos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
      HEARTH_ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, op, std::move(left), std::move(right), pos));
    }
    return left;
  }

  Result<ExprPtr> parse_pow() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
    while (is_op("**")) {
      const SourcePos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
      HEARTH_ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, Op::kPow, std::move(left), std::move(right), pos));
    }
    return left;
  }

  Result<ExprPtr> parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      NestingGuard guard(nesting_);
      if (guard.too_deep()) return too_deep();
      const Op op = is_op("-") ? Op::kNeg : Op::kPos;
      const SourcePos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
      auto e = make(ExprKind::kUnary, pos);
      e->op = op;
      e->operands.push_back(std::move(operand));
      HEARTH_ASSIGN_OR_RETURN(node, finish(std::move(e)));
    } else {
      HEARTH_ASSIGN_OR_RETURN(node, parse_primary());
    }
    HEARTH_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
    if (with_filter) {
      HEARTH_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
    }
    return node;
  }

  Result<ExprPtr> parse_primary() {
    const Token& t = cur();
    const SourcePos pos = t.pos;
    switch (t.kind) {
      case TokenKind::kName: {
        auto e = make(ExprKind::kLiteral, pos);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value::boolean(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value::boolean(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        advance();
        return e;
      }
      case TokenKind::kString: {
        std::string value;
        while (cur().kind == TokenKind::kString) {  // adjacent literals join
          value += cur().text;
          advance();
        }
        auto e = make(ExprKind::kLiteral, pos);
        e->literal = Value::string(std::move(value));
        return e;
      }
      case TokenKind::kInt: {
        auto e = make(ExprKind::kLiteral, pos);
        e->literal = Value::integer(t.int_value);
        advance();
        return e;
      }
      case TokenKind::kFloat: {
        auto e = make(ExprKind::kLiteral, pos);
        e->literal = Value::number(t.float_value);
        advance();
        return e;
      }
      case TokenKind::kOp:
        if (t.text == "(") {
          advance();
          HEARTH_ASSIGN_OR_RETURN(ExprPtr inner, parse_tuple(true, {}, true));
          HEARTH_RETURN_IF_ERROR(expect_op(")"));
          return inner;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    return unexpected("an expression");
  }

  Result<ExprPtr> parse_list() {
    auto e = make(ExprKind::kList, cur().pos);
    advance();  // '['
    while (!is_op("]")) {
      if (!e->operands.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      if (is_op("]")) break;
      HEARTH_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
      e->operands.push_back(std::move(item));
    }
    HEARTH_RETURN_IF_ERROR(expect_op("]"));
    return finish(std::move(e));
  }

  Result<ExprPtr> parse_dict() {
    auto e = make(ExprKind::kDict, cur().pos);
    advance();  // '{'
    while (!is_op("}")) {
      if (!e->operands.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      if (is_op("}")) break;
      HEARTH_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
      HEARTH_RETURN_IF_ERROR(expect_op(":"));
      HEARTH_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      e->operands.push_back(std::move(key));
      e->operands.push_back(std::move(value));
    }
    HEARTH_RETURN_IF_ERROR(expect_op("}"));
    return finish(std::move(e));
  }

  Result<ExprPtr> parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        HEARTH_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
      } else if (is_op("(")) {
        HEARTH_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        HEARTH_ASSIGN_OR_RETURN(node, parse_filter(std::move(node)));
      } else if (is_name("is")) {
        HEARTH_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
      } else if (is_op("(")) {
        HEARTH_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  // One bound of a slice, absent when the next token ends it.
  Result<ExprPtr> parse_slice_bound() {
    if (is_op(":") || is_op("]") || is_op(",")) return ExprPtr();
    return parse_expression(true);
  }

  Result<ExprPtr> parse_subscript(ExprPtr node) {
    const SourcePos pos = cur().pos;
    if (skip_op(".")) {
      if (cur().kind == TokenKind::kName) {
        auto e = make(ExprKind::kGetAttr, pos);
        e->name = cur().text;
        advance();
        e->operands.push_back(std::move(node));
        return finish(std::move(e));
      }
      if (cur().kind == TokenKind::kInt) {
        auto index = make(ExprKind::kLiteral, cur().pos);
        index->literal = Value::integer(cur().int_value);
        advance();
        auto e = make(ExprKind::kGetItem, pos);
        e->operands.push_back(std::move(node));
        e->operands.push_back(std::move(index));
        return finish(std::move(e));
      }
      return unexpected("an attribute name");
    }
    advance();  // '['
    HEARTH_ASSIGN_OR_RETURN(ExprPtr start, parse_slice_bound());
    if (!is_op(":")) {
      if (!start) return unexpected("an index");
      if (is_op(",")) return unsupported_at(cur().pos, "tuple subscripts are not supported");
      HEARTH_RETURN_IF_ERROR(expect_op("]"));
      auto e = make(ExprKind::kGetItem, pos);
      e->operands.push_back(std::move(node));
      e->operands.push_back(std::move(start));
      return finish(std::move(e));
    }
    advance();  // ':'
    HEARTH_ASSIGN_OR_RETURN(ExprPtr stop, parse_slice_bound());
    ExprPtr step;
    if (skip_op(":")) {
      HEARTH_ASSIGN_OR_RETURN(step, parse_slice_bound());
    }
    if (is_op(",")) return unsupported_at(cur().pos, "tuple subscripts are not supported");
    HEARTH_RETURN_IF_ERROR(expect_op("]"));
    auto e = make(ExprKind::kSlice, pos);
    e->operands.push_back(std::move(node));
    e->operands.push_back(std::move(start));
    e->operands.push_back(std::move(stop));
    e->operands.push_back(std::move(step));
    return finish(std::move(e));
  }

  // `(args)` into e's operands (after the subject) and kw_names.
  Status parse_call_args(Expr& e) {
    HEARTH_RETURN_IF_ERROR(expect_op("("));
    bool first = true;
    while (!is_op(")")) {
      if (!first) HEARTH_RETURN_IF_ERROR(expect_op(","));
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) return unsupported_at(cur().pos, "*args and **kwargs in calls are not supported");
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().text == "=") {
        std::string name = cur().text;
        if (std::find(e.kw_names.begin(), e.kw_names.end(), name) != e.kw_names.end()) {
          return error(fmt::format("keyword argument '{}' repeated", name));
        }
        advance();
        advance();
        HEARTH_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
        e.operands.push_back(std::move(value));
        e.kw_names.push_back(std::move(name));
        continue;
      }
      if (!e.kw_names.empty()) return error("positional argument follows keyword argument");
      HEARTH_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      e.operands.push_back(std::move(value));
    }
    return expect_op(")");
  }

  Result<ExprPtr> parse_call(ExprPtr callee) {
    auto e = make(ExprKind::kCall, cur().pos);
    e->operands.push_back(std::move(callee));
    HEARTH_RETURN_IF_ERROR(parse_call_args(*e));
    return finish(std::move(e));
  }

  // A dotted filter or test name.
  Result<std::string> parse_dotted_name() {
    HEARTH_ASSIGN_OR_RETURN(std::string name, expect_name());
    while (skip_op(".")) {
      HEARTH_ASSIGN_OR_RETURN(std::string part, expect_name());
      name += "." + part;
    }
    return name;
  }

  // `name(args)` of a filter; the subject is set by the caller.
  Result<ExprPtr> parse_filter_chain_item() {
    const SourcePos pos = cur().pos;
    HEARTH_ASSIGN_OR_RETURN(std::string name, parse_dotted_name());
    if (!has_filter(name)) return unsupported_at(pos, fmt::format("no filter named '{}'", name));
    auto e = make(ExprKind::kFilter, pos);
    e->name = std::move(name);
    e->operands.push_back(nullptr);
    if (is_op("(")) HEARTH_RETURN_IF_ERROR(parse_call_args(*e));
    return e;
  }

  // `| f(args) | g ...` applied to `node` (null in filter and set blocks: one filter).
  Result<ExprPtr> parse_filter(ExprPtr node) {
    const bool block = node == nullptr;
    do {
      advance();  // '|'
      HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_filter_chain_item());
      e->operands[0] = std::move(node);
      HEARTH_ASSIGN_OR_RETURN(node, finish(std::move(e)));
    } while (!block && is_op("|"));
    return node;
  }

  Result<ExprPtr> parse_test(ExprPtr node) {
    auto e = make(ExprKind::kTest, cur().pos);
    advance();  // 'is'
    e->negated = skip_name("not");
    const SourcePos name_pos = cur().pos;
    HEARTH_ASSIGN_OR_RETURN(e->name, parse_dotted_name());
    if (!has_test(e->name)) return unsupported_at(name_pos, fmt::format("no test named '{}'", e->name));
    e->operands.push_back(std::move(node));
    if (is_op("(")) {
      HEARTH_RETURN_IF_ERROR(parse_call_args(*e));
    } else {
      // `x is divisibleby 3`: one argument without parentheses.
      const Token& t = cur();
      const bool starts_arg = t.kind == TokenKind::kString || t.kind == TokenKind::kInt ||
                              t.kind == TokenKind::kFloat || is_op("[") || is_op("{") ||
                              (t.kind == TokenKind::kName && t.text != "else" && t.text != "or" && t.text != "and" &&
                               t.text != "if" && t.text != "in" && t.text != "not" && t.text != "is");
      if (starts_arg) {
        HEARTH_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
        HEARTH_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
        e->operands.push_back(std::move(arg));
      }
    }
    return finish(std::move(e));
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<std::shared_ptr<const Template>> jinja_parse(std::string_view source) {
  HEARTH_ASSIGN_OR_RETURN(std::vector<Token> tokens, jinja_tokenize(source));
  return Parser(std::move(tokens)).run();
}

}  // namespace hearth::jinja
