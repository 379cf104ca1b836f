#include "common/tokenizer/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "common/tokenizer/jinja/lexer.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::tokenizer::jinja {
namespace {

using Tags = std::initializer_list<std::string_view>;

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth)
      : tokens_(std::move(tokens)), max_depth_(max_depth) {}

  absl::StatusOr<std::vector<Stmt>> ParseTemplate() {
    std::vector<Stmt> out;
    std::string found;
    RETURN_IF_ERROR(ParseBody(&out, {}, &found));
    return out;
  }

 private:
  // Counts recursion; past max_depth the parse fails instead of going deeper.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) { ++p_->nesting_; }
    ~DepthGuard() { --p_->nesting_; }
    absl::Status Check() const {
      return p_->nesting_ > p_->max_depth_ ? p_->Error(p_->Peek(), "nested too deeply")
                                           : absl::OkStatus();
    }

   private:
    Parser* p_;
  };

  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kOperator && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kName && Peek(ahead).text == name;
  }
  bool SkipOp(std::string_view op) { return IsOp(op) && (Next(), true); }
  bool SkipName(std::string_view name) { return IsName(name) && (Next(), true); }

  absl::Status Error(const Token& at, std::string_view message) const {
    return absl::InvalidArgumentError(
        StrCat("line ", at.line, ", column ", at.column, ": ", message));
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEnd:
        return "end of template";
      case TokenKind::kStmtEnd:
      case TokenKind::kExprEnd:
        return StrCat("'", t.text, "'");
      case TokenKind::kString:
        return "a string";
      default:
        return StrCat("'", t.text, "'");
    }
  }
  absl::Status ExpectOp(std::string_view op) {
    if (SkipOp(op)) return absl::OkStatus();
    return Error(Peek(), StrCat("expected '", op, "', got ", Describe(Peek())));
  }
  absl::Status ExpectKind(TokenKind kind, std::string_view what) {
    if (Peek().kind == kind) return Next(), absl::OkStatus();
    return Error(Peek(), StrCat("expected ", what, ", got ", Describe(Peek())));
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().kind != TokenKind::kName) {
      return Error(Peek(), StrCat("expected a name, got ", Describe(Peek())));
    }
    return Next().text;
  }
  absl::Status ExpectStmtEnd() { return ExpectKind(TokenKind::kStmtEnd, "'%}'"); }

  absl::StatusOr<ExprPtr> Make(Expr::Kind kind, const Token& at, std::vector<ExprPtr> args,
                               std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    e->name = std::move(name);
    for (const ExprPtr& a : args) {
      if (a != nullptr) e->depth = std::max(e->depth, a->depth + 1);
    }
    e->args = std::move(args);
    if (e->depth > max_depth_) return Error(at, "expression nested too deeply");
    return e;
  }
  static std::vector<ExprPtr> Args(ExprPtr a, ExprPtr b = nullptr, ExprPtr c = nullptr) {
    std::vector<ExprPtr> v;
    v.push_back(std::move(a));
    if (b != nullptr) v.push_back(std::move(b));
    if (c != nullptr) v.push_back(std::move(c));
    return v;
  }

  // ---- Statements ----

  // Parses until `{%` followed by one of `end_tags` (consumed, name in *found).
  absl::Status ParseBody(std::vector<Stmt>* out, Tags end_tags, std::string* found) {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    while (true) {
      const Token& t = Peek();
      switch (t.kind) {
        case TokenKind::kText: {
          Stmt s = At(Stmt::Kind::kText, Next());
          s.text = t.text;
          out->push_back(std::move(s));
          break;
        }
        case TokenKind::kExprBegin: {
          Stmt s = At(Stmt::Kind::kOutput, Next());
          ASSIGN_OR_RETURN(s.expr, ParseTuple(true, false));
          RETURN_IF_ERROR(ExpectKind(TokenKind::kExprEnd, "'}}'"));
          out->push_back(std::move(s));
          break;
        }
        case TokenKind::kStmtBegin: {
          for (std::string_view tag : end_tags) {
            if (IsName(tag, 1)) {
              Next();
              *found = Next().text;
              return absl::OkStatus();
            }
          }
          RETURN_IF_ERROR(ParseStatement(out));
          break;
        }
        case TokenKind::kEnd:
          if (end_tags.size() == 0) return absl::OkStatus();
          return Error(t, StrCat("unexpected end of template, expected '", *end_tags.begin(), "'"));
        default:
          return Error(t, StrCat("unexpected ", Describe(t)));
      }
    }
  }

  static Stmt At(Stmt::Kind kind, const Token& t) {
    Stmt s;
    s.kind = kind;
    s.line = t.line;
    s.column = t.column;
    return s;
  }

  absl::Status ParseStatement(std::vector<Stmt>* out) {
    Next();  // {%
    const Token& tag = Peek();
    ASSIGN_OR_RETURN(const std::string name, ExpectName());
    if (name == "for") return ParseFor(tag, out);
    if (name == "if") return ParseIf(tag, out);
    if (name == "set") return ParseSet(tag, out);
    if (name == "macro") return ParseMacro(tag, out);
    if (name == "filter") return ParseFilterBlock(tag, out);
    if (name == "break" || name == "continue") {
      if (loops_ == 0) return Error(tag, StrCat("'", name, "' outside a loop"));
      out->push_back(At(name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, tag));
      return ExpectStmtEnd();
    }
    if (name == "generation") {  // transformers' assistant-mask marker: renders its body
      RETURN_IF_ERROR(ExpectStmtEnd());
      std::string found;
      RETURN_IF_ERROR(ParseBody(out, {"endgeneration"}, &found));
      return ExpectStmtEnd();
    }
    for (std::string_view known : {"include", "import", "from", "extends", "block", "call", "with",
                                   "autoescape", "do", "trans"}) {
      if (name == known) {
        return absl::UnimplementedError(StrCat("line ", tag.line, ", column ", tag.column,
                                               ": the '", name, "' tag is not supported"));
      }
    }
    return Error(tag, StrCat("unknown or unexpected tag '", name, "'"));
  }

  // Loop or assignment targets: `a`, `a, b` or `(a, b)`.
  absl::StatusOr<std::vector<std::string>> ParseNames() {
    const bool parens = SkipOp("(");
    std::vector<std::string> names;
    do {
      ASSIGN_OR_RETURN(std::string n, ExpectName());
      names.push_back(std::move(n));
    } while (SkipOp(","));
    if (parens) RETURN_IF_ERROR(ExpectOp(")"));
    return names;
  }

  absl::Status ParseFor(const Token& tag, std::vector<Stmt>* out) {
    Stmt s = At(Stmt::Kind::kFor, tag);
    ASSIGN_OR_RETURN(s.names, ParseNames());
    if (!SkipName("in")) return Error(Peek(), "expected 'in'");
    ASSIGN_OR_RETURN(s.expr, ParseTuple(false, false));
    if (SkipName("if")) {
      ASSIGN_OR_RETURN(s.filter, ParseExpression(true));
    }
    if (IsName("recursive")) {
      return absl::UnimplementedError(StrCat("line ", Peek().line, ", column ", Peek().column,
                                             ": recursive loops are not supported"));
    }
    RETURN_IF_ERROR(ExpectStmtEnd());
    std::string found;
    ++loops_;
    absl::Status status = ParseBody(&s.body, {"endfor", "else"}, &found);
    --loops_;
    RETURN_IF_ERROR(status);
    if (found == "else") {
      RETURN_IF_ERROR(ExpectStmtEnd());
      RETURN_IF_ERROR(ParseBody(&s.else_body, {"endfor"}, &found));
    }
    out->push_back(std::move(s));
    return ExpectStmtEnd();
  }

  absl::Status ParseIf(const Token& tag, std::vector<Stmt>* out) {
    Stmt s = At(Stmt::Kind::kIf, tag);
    ASSIGN_OR_RETURN(s.expr, ParseTuple(false, false));
    RETURN_IF_ERROR(ExpectStmtEnd());
    std::string found;
    RETURN_IF_ERROR(ParseBody(&s.body, {"elif", "else", "endif"}, &found));
    if (found == "elif") {
      DepthGuard guard(this);
      RETURN_IF_ERROR(guard.Check());
      RETURN_IF_ERROR(ParseIf(Peek(), &s.else_body));  // consumes through endif
      out->push_back(std::move(s));
      return absl::OkStatus();
    }
    if (found == "else") {
      RETURN_IF_ERROR(ExpectStmtEnd());
      RETURN_IF_ERROR(ParseBody(&s.else_body, {"endif"}, &found));
    }
    out->push_back(std::move(s));
    return ExpectStmtEnd();
  }

  absl::Status ParseSet(const Token& tag, std::vector<Stmt>* out) {
    Stmt s = At(Stmt::Kind::kSet, tag);
    if (Peek().kind == TokenKind::kName && IsOp(".", 1)) {  // set ns.attr = ...
      const Token& ns = Next();
      ASSIGN_OR_RETURN(s.target, Make(Expr::Kind::kName, ns, {}, ns.text));
      Next();  // .
      ASSIGN_OR_RETURN(s.text, ExpectName());
    } else {
      ASSIGN_OR_RETURN(s.names, ParseNames());
    }
    if (SkipOp("=")) {
      ASSIGN_OR_RETURN(s.expr, ParseTuple(true, false));
      out->push_back(std::move(s));
      return ExpectStmtEnd();
    }
    if (s.target != nullptr || s.names.size() != 1) return Error(Peek(), "expected '='");
    s.kind = Stmt::Kind::kSetBlock;
    RETURN_IF_ERROR(ExpectStmtEnd());
    std::string found;
    RETURN_IF_ERROR(ParseBody(&s.body, {"endset"}, &found));
    out->push_back(std::move(s));
    return ExpectStmtEnd();
  }

  // {% filter f(args) | g %} body {% endfilter %}: the body's text through f, then g.
  absl::Status ParseFilterBlock(const Token& tag, std::vector<Stmt>* out) {
    Stmt s = At(Stmt::Kind::kFilterBlock, tag);
    ASSIGN_OR_RETURN(ExprPtr body, Make(Expr::Kind::kName, tag, {}, std::string(kFilterBody)));
    const Token& at = Peek();
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    if (SkipOp("(")) {
      ASSIGN_OR_RETURN(s.expr, ParseCall(at, Expr::Kind::kFilter, std::move(body), name));
    } else {
      ASSIGN_OR_RETURN(s.expr, Make(Expr::Kind::kFilter, at, Args(std::move(body)), name));
    }
    while (IsOp("|")) {
      const Token& bar = Next();
      ASSIGN_OR_RETURN(std::string next, ExpectName());
      if (SkipOp("(")) {
        ASSIGN_OR_RETURN(s.expr, ParseCall(bar, Expr::Kind::kFilter, std::move(s.expr), next));
      } else {
        ASSIGN_OR_RETURN(s.expr, Make(Expr::Kind::kFilter, bar, Args(std::move(s.expr)), next));
      }
    }
    RETURN_IF_ERROR(ExpectStmtEnd());
    std::string found;
    RETURN_IF_ERROR(ParseBody(&s.body, {"endfilter"}, &found));
    out->push_back(std::move(s));
    return ExpectStmtEnd();
  }

  absl::Status ParseMacro(const Token& tag, std::vector<Stmt>* out) {
    Stmt s = At(Stmt::Kind::kMacro, tag);
    ASSIGN_OR_RETURN(s.text, ExpectName());
    RETURN_IF_ERROR(ExpectOp("("));
    while (!SkipOp(")")) {
      if (!s.names.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (SkipOp(")")) break;
      ASSIGN_OR_RETURN(std::string param, ExpectName());
      s.names.push_back(std::move(param));
      if (SkipOp("=")) {
        ASSIGN_OR_RETURN(ExprPtr def, ParseExpression(true));
        s.defaults.push_back(std::move(def));
      } else if (!s.defaults.empty()) {
        return Error(Peek(), "a parameter without a default follows one with a default");
      }
    }
    RETURN_IF_ERROR(ExpectStmtEnd());
    std::string found;
    const int loops = std::exchange(loops_, 0);
    absl::Status status = ParseBody(&s.body, {"endmacro"}, &found);
    loops_ = loops;
    RETURN_IF_ERROR(status);
    out->push_back(std::move(s));
    return ExpectStmtEnd();
  }

  // ---- Expressions (jinja2's precedence, lowest first) ----

  bool AtTupleEnd() const {
    const TokenKind k = Peek().kind;
    return k == TokenKind::kExprEnd || k == TokenKind::kStmtEnd || IsOp(")") || IsName("in") ||
           IsName("recursive");
  }

  // `a, b, c` is a tuple (a list here); `a` alone is itself.
  absl::StatusOr<ExprPtr> ParseTuple(bool condexpr, bool in_parens) {
    const Token& at = Peek();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!SkipOp(",")) break;
        is_tuple = true;
      }
      if (AtTupleEnd()) break;
      ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(condexpr));
      items.push_back(std::move(e));
    }
    if (!is_tuple && items.size() == 1) return std::move(items[0]);
    if (items.empty() && !in_parens) {
      return Error(at, StrCat("expected an expression, got ", Describe(at)));
    }
    return Make(Expr::Kind::kList, at, std::move(items), "tuple");
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool condexpr) {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    if (!condexpr) return ParseOr();
    ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    while (IsName("if")) {
      const Token& at = Next();
      ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr otherwise;
      if (SkipName("else")) {
        ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
      }
      std::vector<ExprPtr> args;
      args.push_back(std::move(cond));
      args.push_back(std::move(e));
      args.push_back(std::move(otherwise));  // may be null
      ASSIGN_OR_RETURN(e, Make(Expr::Kind::kCond, at, std::move(args)));
    }
    return e;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const Token& at = Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      ASSIGN_OR_RETURN(left, Make(Expr::Kind::kOr, at, Args(std::move(left), std::move(right))));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const Token& at = Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      ASSIGN_OR_RETURN(left, Make(Expr::Kind::kAnd, at, Args(std::move(left), std::move(right))));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (!IsName("not")) return ParseCompare();
    const Token& at = Next();
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    return Make(Expr::Kind::kUnary, at, Args(std::move(operand)), "not");
  }

  // `a < b` is a binary node; Python's chains (`a < b <= c`) a kCompare node.
  absl::StatusOr<ExprPtr> ParseCompare() {
    const Token& start = Peek();
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    std::vector<ExprPtr> operands;
    operands.push_back(std::move(first));
    std::vector<std::string> ops;
    while (true) {
      const Token& at = Peek();
      if (at.kind == TokenKind::kOperator &&
          (at.text == "==" || at.text == "!=" || at.text == "<" || at.text == "<=" ||
           at.text == ">" || at.text == ">=")) {
        ops.push_back(Next().text);
      } else if (SkipName("in")) {
        ops.push_back("in");
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        ops.push_back("not in");
      } else {
        break;
      }
      ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
      operands.push_back(std::move(right));
    }
    if (ops.empty()) return std::move(operands[0]);
    const bool chain = ops.size() > 1;
    ASSIGN_OR_RETURN(ExprPtr e, Make(chain ? Expr::Kind::kCompare : Expr::Kind::kBinary, start,
                                     std::move(operands), chain ? "" : ops[0]));
    if (chain) e->ops = std::move(ops);
    return e;
  }

  // One precedence level of left-associative binary operators.
  template <typename Sub>
  absl::StatusOr<ExprPtr> ParseBinary(Tags ops, Sub sub) {
    ASSIGN_OR_RETURN(ExprPtr left, (this->*sub)());
    while (true) {
      std::string op;
      for (std::string_view o : ops) {
        if (IsOp(o)) op = std::string(o);
      }
      if (op.empty()) return left;
      const Token& at = Next();
      ASSIGN_OR_RETURN(ExprPtr right, (this->*sub)());
      ASSIGN_OR_RETURN(left,
                       Make(Expr::Kind::kBinary, at, Args(std::move(left), std::move(right)), op));
    }
  }
  absl::StatusOr<ExprPtr> ParseMath1() { return ParseBinary({"+", "-"}, &Parser::ParseConcat); }
  absl::StatusOr<ExprPtr> ParseConcat() { return ParseBinary({"~"}, &Parser::ParseMath2); }
  absl::StatusOr<ExprPtr> ParseMath2() {
    return ParseBinary({"*", "/", "//", "%"}, &Parser::ParsePow);
  }
  absl::StatusOr<ExprPtr> ParsePow() { return ParseBinary({"**"}, &Parser::ParseUnaryWithFilters); }
  absl::StatusOr<ExprPtr> ParseUnaryWithFilters() { return ParseUnary(true); }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filters) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token& at = Next();
      DepthGuard guard(this);
      RETURN_IF_ERROR(guard.Check());
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      ASSIGN_OR_RETURN(node, Make(Expr::Kind::kUnary, at, Args(std::move(operand)), at.text));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filters) {
      ASSIGN_OR_RETURN(node, ParseFiltersAndTests(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> Literal(const Token& at, Value v) {
    ASSIGN_OR_RETURN(ExprPtr e, Make(Expr::Kind::kLiteral, at, {}));
    e->value = std::move(v);
    return e;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Peek();
    switch (t.kind) {
      case TokenKind::kName: {
        Next();
        if (t.text == "true" || t.text == "True") return Literal(t, Value::Bool(true));
        if (t.text == "false" || t.text == "False") return Literal(t, Value::Bool(false));
        if (t.text == "none" || t.text == "None") return Literal(t, Value::None());
        return Make(Expr::Kind::kName, t, {}, t.text);
      }
      case TokenKind::kString: {
        std::string s;
        while (Peek().kind == TokenKind::kString) s += Next().text;  // 'a' 'b' is 'ab'
        return Literal(t, Value::String(std::move(s)));
      }
      case TokenKind::kInt: {
        Next();
        int64_t v = 0;
        const auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec != std::errc()) return Error(t, "integer literal out of range");
        return Literal(t, Value::Int(v));
      }
      case TokenKind::kFloat: {
        Next();
        double v = 0;
        std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);  // the lexer checked it
        return Literal(t, Value::Float(v));
      }
      case TokenKind::kOperator: {
        DepthGuard guard(this);
        RETURN_IF_ERROR(guard.Check());
        if (SkipOp("(")) {
          ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true, true));
          RETURN_IF_ERROR(ExpectOp(")"));
          return e;
        }
        if (SkipOp("[")) {
          std::vector<ExprPtr> items;
          while (!SkipOp("]")) {
            if (!items.empty()) RETURN_IF_ERROR(ExpectOp(","));
            if (SkipOp("]")) break;
            ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
            items.push_back(std::move(e));
          }
          return Make(Expr::Kind::kList, t, std::move(items));
        }
        if (SkipOp("{")) {
          std::vector<ExprPtr> items;
          while (!SkipOp("}")) {
            if (!items.empty()) RETURN_IF_ERROR(ExpectOp(","));
            if (SkipOp("}")) break;
            ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
            RETURN_IF_ERROR(ExpectOp(":"));
            ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
            items.push_back(std::move(key));
            items.push_back(std::move(value));
          }
          return Make(Expr::Kind::kDict, t, std::move(items));
        }
        break;
      }
      default:
        break;
    }
    return Error(t, StrCat("unexpected ", Describe(t)));
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      const Token& at = Peek();
      if (SkipOp(".")) {
        const Token& attr = Next();
        if (attr.kind == TokenKind::kName) {
          ASSIGN_OR_RETURN(node, Make(Expr::Kind::kGetAttr, at, Args(std::move(node)), attr.text));
        } else if (attr.kind == TokenKind::kInt) {  // x.0 is x[0]
          ASSIGN_OR_RETURN(ExprPtr index, Literal(attr, Value::Int(std::atoll(attr.text.c_str()))));
          ASSIGN_OR_RETURN(node,
                           Make(Expr::Kind::kGetItem, at, Args(std::move(node), std::move(index))));
        } else {
          return Error(attr, "expected a name after '.'");
        }
      } else if (SkipOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(at, std::move(node)));
      } else if (SkipOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(at, Expr::Kind::kCall, std::move(node), ""));
      } else {
        return node;
      }
    }
  }

  // After `[`: an index, or a slice `start:stop:step` with any part left out.
  absl::StatusOr<ExprPtr> ParseSubscript(const Token& at, ExprPtr subject) {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    ExprPtr parts[3];
    if (!IsOp(":")) {
      ASSIGN_OR_RETURN(parts[0], ParseExpression(true));
      if (SkipOp("]")) {
        return Make(Expr::Kind::kGetItem, at, Args(std::move(subject), std::move(parts[0])));
      }
    }
    RETURN_IF_ERROR(ExpectOp(":"));
    for (int i = 1; i < 3; ++i) {
      if (!IsOp("]") && !IsOp(":")) {
        ASSIGN_OR_RETURN(parts[i], ParseExpression(true));
      }
      if (i == 1 && !SkipOp(":")) break;
    }
    RETURN_IF_ERROR(ExpectOp("]"));
    std::vector<ExprPtr> args;
    args.push_back(std::move(subject));
    for (ExprPtr& p : parts) args.push_back(std::move(p));
    return Make(Expr::Kind::kSlice, at, std::move(args));
  }

  // After `(`: positional then keyword arguments, into a call, filter or test node whose
  // first argument is `subject`.
  absl::StatusOr<ExprPtr> ParseCall(const Token& at, Expr::Kind kind, ExprPtr subject,
                                    std::string name) {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    std::vector<ExprPtr> args;
    args.push_back(std::move(subject));
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    while (!SkipOp(")")) {
      if (args.size() + kwargs.size() > 1) RETURN_IF_ERROR(ExpectOp(","));
      if (SkipOp(")")) break;
      if (IsOp("*") || IsOp("**")) return Error(Peek(), "*args and **kwargs are not supported");
      if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        Next();
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
        kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!kwargs.empty()) {
          return Error(Peek(), "a positional argument follows keyword arguments");
        }
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
        args.push_back(std::move(v));
      }
    }
    ASSIGN_OR_RETURN(ExprPtr e, Make(kind, at, std::move(args), std::move(name)));
    for (auto& [k, v] : kwargs) e->depth = std::max(e->depth, v->depth + 1);
    e->kwargs = std::move(kwargs);
    if (e->depth > max_depth_) return Error(at, "expression nested too deeply");
    return e;
  }

  absl::StatusOr<ExprPtr> ParseFiltersAndTests(ExprPtr node) {
    while (true) {
      const Token& at = Peek();
      if (SkipOp("|")) {
        ASSIGN_OR_RETURN(std::string name, ExpectName());
        if (SkipOp("(")) {
          ASSIGN_OR_RETURN(node, ParseCall(at, Expr::Kind::kFilter, std::move(node), name));
        } else {
          ASSIGN_OR_RETURN(node, Make(Expr::Kind::kFilter, at, Args(std::move(node)), name));
        }
      } else if (SkipName("is")) {
        const bool negated = SkipName("not");
        ASSIGN_OR_RETURN(std::string name, ExpectName());
        const Token& next = Peek();
        if (SkipOp("(")) {
          ASSIGN_OR_RETURN(node, ParseCall(at, Expr::Kind::kTest, std::move(node), name));
        } else if ((next.kind == TokenKind::kName || next.kind == TokenKind::kString ||
                    next.kind == TokenKind::kInt || next.kind == TokenKind::kFloat || IsOp("[") ||
                    IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          if (IsName("is")) return Error(next, "tests cannot be chained with 'is'");
          ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());  // `x is divisibleby 3`
          ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          ASSIGN_OR_RETURN(
              node, Make(Expr::Kind::kTest, at, Args(std::move(node), std::move(arg)), name));
        } else {
          ASSIGN_OR_RETURN(node, Make(Expr::Kind::kTest, at, Args(std::move(node)), name));
        }
        if (negated) {
          ASSIGN_OR_RETURN(node, Make(Expr::Kind::kUnary, at, Args(std::move(node)), "not"));
        }
      } else if (SkipOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(at, Expr::Kind::kCall, std::move(node), ""));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  const int max_depth_;
  int nesting_ = 0;  // recursion depth of the parse so far
  int loops_ = 0;    // enclosing for loops (break/continue are legal inside one)
};

}  // namespace

absl::StatusOr<std::vector<Stmt>> Parse(std::string_view source, int max_depth) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  return Parser(std::move(tokens), max_depth).ParseTemplate();
}

}  // namespace tandem::tokenizer::jinja
