#include "common/tokenizer/jinja/interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/tokenizer/jinja/builtins.h"
#include "common/tokenizer/jinja/py_string.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::tokenizer::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

// Python's // and % on ints: the quotient rounds down, the remainder takes the divisor's sign.
int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t FloorMod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// The positions a Python slice [start:stop:step] takes from a sequence of n items.
absl::StatusOr<std::vector<size_t>> SliceIndices(size_t n_items, const Value& start_v,
                                                 const Value& stop_v, const Value& step_v) {
  const auto n = static_cast<int64_t>(n_items);
  for (const Value* v : {&start_v, &stop_v, &step_v}) {
    if (!v->is_none() && !v->is_integer()) {
      return absl::InvalidArgumentError("slice indices must be integers or None");
    }
  }
  const int64_t step = step_v.is_none() ? 1 : step_v.int_value();
  if (step == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t if_none) {
    if (v.is_none()) return if_none;
    int64_t i = v.int_value();
    if (i < 0) i = std::max<int64_t>(i + n, step < 0 ? -1 : 0);
    return std::min(i, step < 0 ? n - 1 : n);
  };
  const int64_t start = clamp(start_v, step < 0 ? n - 1 : 0);
  const int64_t stop = clamp(stop_v, step < 0 ? -1 : n);
  std::vector<size_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    out.push_back(static_cast<size_t>(i));
  }
  return out;
}

class Interpreter {
 public:
  Interpreter(const ValueDict& variables, const Limits& limits) : budget_(limits) {
    frames_.emplace_back();
    for (const auto& [k, v] : variables) frames_[0][k] = v;
  }

  absl::StatusOr<std::string> Run(const std::vector<Stmt>& program) {
    std::string out;
    out_ = &out;
    RETURN_IF_ERROR(ExecBlock(program).status());
    return out;
  }

 private:
  using Frame = absl::flat_hash_map<std::string, Value, StringViewHash, StringViewEq>;

  // Recursion depth of the render (expressions, statements, macro calls).
  class DepthGuard {
   public:
    explicit DepthGuard(Interpreter* in) : in_(in) { ++in_->depth_; }
    ~DepthGuard() { --in_->depth_; }
    absl::Status Check() const {
      if (in_->depth_ <= in_->budget_.limits().max_depth) return absl::OkStatus();
      return absl::ResourceExhaustedError(
          StrCat("the template recursed deeper than ", in_->budget_.limits().max_depth, " levels"));
    }

   private:
    Interpreter* in_;
  };

  template <typename Node>
  static absl::Status Error(const Node& at, std::string_view message) {
    return absl::InvalidArgumentError(
        StrCat("line ", at.line, ", column ", at.column, ": ", message));
  }
  // A builtin's error, located at the node that called it. Exhausted limits stay
  // ResourceExhausted; everything else (unknown names too) is the template's error.
  template <typename Node>
  static absl::Status Located(const Node& at, const absl::Status& s) {
    if (s.ok() || s.code() == absl::StatusCode::kResourceExhausted) return s;
    return Error(at, std::string(s.message()));
  }
  static absl::Status UndefinedError(const Expr& at, const Value& v) {
    return Error(at, v.undefined_hint());
  }

  absl::Status Emit(std::string_view s) {
    if (out_->size() + s.size() > budget_.limits().max_output_bytes) {
      return absl::ResourceExhaustedError(
          StrCat("the rendered text exceeds ", budget_.limits().max_output_bytes, " bytes"));
    }
    out_->append(s);
    return budget_.SpendBytes(s.size());
  }

  absl::Status CheckValue(const Expr& at, const Value& v) {
    if (v.depth() <= budget_.limits().max_value_depth) return absl::OkStatus();
    return Error(at,
                 StrCat("lists and dicts nested deeper than ", budget_.limits().max_value_depth));
  }

  Value Lookup(std::string_view name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      if (auto found = it->find(name); found != it->end()) return found->second;
    }
    if (name == "raise_exception" || IsGlobalFunction(name)) {
      return Value::Function(std::string(name));
    }
    return Value::Undefined(StrCat("'", name, "' is undefined"));
  }

  // Binds `names` to `v`, unpacking a list when there are several.
  absl::Status Assign(const Stmt& at, const std::vector<std::string>& names, const Value& v) {
    if (names.size() == 1) {
      frames_.back()[names[0]] = v;
      return absl::OkStatus();
    }
    if (!v.is_list() || v.list().size() != names.size()) {
      return Error(at, StrCat("cannot unpack ", TypeName(v), " into ", names.size(), " names"));
    }
    for (size_t i = 0; i < names.size(); ++i) frames_.back()[names[i]] = v.list()[i];
    return absl::OkStatus();
  }

  // ---- Statements ----

  absl::StatusOr<Flow> ExecBlock(const std::vector<Stmt>& block) {
    for (const Stmt& s : block) {
      ASSIGN_OR_RETURN(const Flow flow, Exec(s));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> Exec(const Stmt& s) {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    RETURN_IF_ERROR(budget_.Spend(1));
    switch (s.kind) {
      case Stmt::Kind::kText:
        RETURN_IF_ERROR(Emit(s.text));
        break;
      case Stmt::Kind::kOutput: {
        ASSIGN_OR_RETURN(const Value v, Eval(*s.expr));
        if (v.is_string()) {
          RETURN_IF_ERROR(Emit(v.str()));
        } else {
          std::string text;
          RETURN_IF_ERROR(AppendStr(v, &text, budget_.limits().max_output_bytes));
          RETURN_IF_ERROR(Emit(text));
        }
        break;
      }
      case Stmt::Kind::kIf: {
        ASSIGN_OR_RETURN(const Value cond, Eval(*s.expr));
        return ExecBlock(Truthy(cond) ? s.body : s.else_body);
      }
      case Stmt::Kind::kFor:
        return ExecFor(s);
      case Stmt::Kind::kSet: {
        ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        if (s.target == nullptr) {
          RETURN_IF_ERROR(Assign(s, s.names, v));
          break;
        }
        ASSIGN_OR_RETURN(const Value ns, Eval(*s.target));
        if (ns.kind() != Value::Kind::kNamespace) {
          return Error(s, "cannot assign an attribute of something that is not a namespace()");
        }
        if (v.kind() == Value::Kind::kNamespace) {
          return Error(s, "a namespace cannot hold a namespace");
        }
        for (auto& [k, old] : ns.ns().attrs) {
          if (k == s.text) {
            old = std::move(v);
            return Flow::kNormal;
          }
        }
        ns.ns().attrs.emplace_back(s.text, std::move(v));
        break;
      }
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        std::string* saved = std::exchange(out_, &captured);
        absl::StatusOr<Flow> flow = ExecBlock(s.body);
        out_ = saved;
        RETURN_IF_ERROR(flow.status());
        RETURN_IF_ERROR(Assign(s, s.names, Value::String(std::move(captured))));
        break;
      }
      case Stmt::Kind::kFilterBlock: {
        std::string captured;
        std::string* saved = std::exchange(out_, &captured);
        absl::StatusOr<Flow> flow = ExecBlock(s.body);
        out_ = saved;
        RETURN_IF_ERROR(flow.status());
        frames_.back()[std::string(kFilterBody)] = Value::String(std::move(captured));
        ASSIGN_OR_RETURN(const Value v, Eval(*s.expr));
        std::string text;
        if (v.is_string()) {
          text = v.str();
        } else {
          RETURN_IF_ERROR(AppendStr(v, &text, budget_.limits().max_output_bytes));
        }
        RETURN_IF_ERROR(Emit(text));
        break;
      }
      case Stmt::Kind::kMacro:
        frames_.back()[s.text] = Value::Function(s.text, &s);
        break;
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecFor(const Stmt& s) {
    ASSIGN_OR_RETURN(const Value seq, Eval(*s.expr));
    absl::StatusOr<ValueList> all = Iterate(seq, &budget_);
    if (!all.ok()) return Located(*s.expr, all.status());
    ValueList items;
    for (Value& item : *all) {
      if (s.filter != nullptr) {  // `for x in xs if cond`: the loop sees only what passes
        frames_.emplace_back();
        absl::Status bound = Assign(s, s.names, item);
        absl::StatusOr<Value> keep = bound.ok() ? Eval(*s.filter) : bound;
        frames_.pop_back();
        RETURN_IF_ERROR(keep.status());
        if (!Truthy(*keep)) continue;
      }
      items.push_back(std::move(item));
    }
    // jinja2 runs the else branch unless the last iteration it ran reached the end of the
    // body: so also after a `break`, or a `continue` in the last iteration.
    bool run_else = true;
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      RETURN_IF_ERROR(budget_.Spend(1));
      const auto at = static_cast<size_t>(i);
      ValueDict loop = {{"index", Value::Int(i + 1)},    {"index0", Value::Int(i)},
                        {"revindex", Value::Int(n - i)}, {"revindex0", Value::Int(n - i - 1)},
                        {"first", Value::Bool(i == 0)},  {"last", Value::Bool(i == n - 1)},
                        {"length", Value::Int(n)},       {"depth", Value::Int(1)},
                        {"depth0", Value::Int(0)}};
      if (i > 0) loop.emplace_back("previtem", items[at - 1]);
      if (i + 1 < n) loop.emplace_back("nextitem", items[at + 1]);
      frames_.emplace_back();
      frames_.back()["loop"] = Value::Dict(std::move(loop));
      absl::Status bound = Assign(s, s.names, items[at]);
      absl::StatusOr<Flow> flow = bound.ok() ? ExecBlock(s.body) : bound;
      frames_.pop_back();
      RETURN_IF_ERROR(flow.status());
      if (*flow == Flow::kNormal) run_else = false;
      if (*flow == Flow::kBreak) break;
    }
    if (!run_else || s.else_body.empty()) return Flow::kNormal;
    frames_.emplace_back();  // the else branch has its own scope too
    absl::StatusOr<Flow> flow = ExecBlock(s.else_body);
    frames_.pop_back();
    return flow;
  }

  // ---- Expressions ----

  absl::StatusOr<Value> Eval(const Expr& e) {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    RETURN_IF_ERROR(budget_.Spend(1));
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        ValueList items;
        for (const ExprPtr& a : e.args) {
          ASSIGN_OR_RETURN(Value v, Eval(*a));
          if (v.kind() == Value::Kind::kNamespace) {
            return Error(e, "a list cannot hold a namespace");
          }
          items.push_back(std::move(v));
        }
        Value list = Value::List(std::move(items), e.name == "tuple");
        RETURN_IF_ERROR(CheckValue(e, list));
        return list;
      }
      case Expr::Kind::kDict: {
        ValueDict items;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          ASSIGN_OR_RETURN(const Value key, Eval(*e.args[i]));
          ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
          absl::StatusOr<std::string> k = DictKey(key);
          if (!k.ok()) return Error(*e.args[i], std::string(k.status().message()));
          if (v.kind() == Value::Kind::kNamespace) {
            return Error(e, "a dict cannot hold a namespace");
          }
          auto it = std::find_if(items.begin(), items.end(),
                                 [&](const auto& kv) { return kv.first == *k; });
          if (it != items.end()) {
            it->second = std::move(v);
          } else {
            items.emplace_back(*std::move(k), std::move(v));
          }
        }
        Value dict = Value::Dict(std::move(items));
        RETURN_IF_ERROR(CheckValue(e, dict));
        return dict;
      }
      case Expr::Kind::kGetAttr: {
        ASSIGN_OR_RETURN(const Value obj, Eval(*e.args[0]));
        if (obj.is_undefined()) return UndefinedError(e, obj);
        return GetAttribute(obj, e.name);
      }
      case Expr::Kind::kGetItem:
        return EvalGetItem(e);
      case Expr::Kind::kSlice:
        return EvalSlice(e);
      case Expr::Kind::kCall:
        return EvalCall(e);
      case Expr::Kind::kFilter: {
        ASSIGN_OR_RETURN(const Value subject, Eval(*e.args[0]));
        ASSIGN_OR_RETURN(const CallArgs args, EvalArgs(e));
        absl::StatusOr<Value> v = ApplyFilter(e.name, subject, args, &budget_);
        if (!v.ok()) return Located(e, v.status());
        RETURN_IF_ERROR(CheckValue(e, *v));
        return v;
      }
      case Expr::Kind::kTest: {
        ASSIGN_OR_RETURN(const Value subject, Eval(*e.args[0]));
        ASSIGN_OR_RETURN(const CallArgs args, EvalArgs(e));
        absl::StatusOr<bool> pass = ApplyTest(e.name, subject, args, &budget_);
        if (!pass.ok()) return Located(e, pass.status());
        return Value::Bool(*pass);
      }
      case Expr::Kind::kUnary: {
        ASSIGN_OR_RETURN(const Value v, Eval(*e.args[0]));
        if (e.name == "not") return Value::Bool(!Truthy(v));
        if (v.is_undefined()) return UndefinedError(e, v);
        if (!v.is_number()) {
          return Error(e, StrCat("bad operand type for unary ", e.name, ": '", TypeName(v), "'"));
        }
        if (e.name == "+") return v.kind() == Value::Kind::kBool ? Value::Int(v.int_value()) : v;
        if (v.kind() == Value::Kind::kFloat) return Value::Float(-v.number());
        if (v.int_value() == INT64_MIN) return Error(e, "integer overflow");
        return Value::Int(-v.int_value());
      }
      case Expr::Kind::kBinary: {
        ASSIGN_OR_RETURN(const Value a, Eval(*e.args[0]));
        ASSIGN_OR_RETURN(const Value b, Eval(*e.args[1]));
        return EvalBinary(e, e.name, a, b);
      }
      case Expr::Kind::kCompare: {  // each operand evaluated once, stopping at the first false
        ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
          ASSIGN_OR_RETURN(const Value holds, EvalBinary(e, e.ops[i], left, right));
          if (!Truthy(holds)) return holds;
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case Expr::Kind::kAnd:
      case Expr::Kind::kOr: {  // Python returns the deciding operand itself
        ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
        if (Truthy(a) == (e.kind == Expr::Kind::kOr)) return a;
        return Eval(*e.args[1]);
      }
      case Expr::Kind::kCond: {
        ASSIGN_OR_RETURN(const Value cond, Eval(*e.args[0]));
        if (Truthy(cond)) return Eval(*e.args[1]);
        if (e.args[2] != nullptr) return Eval(*e.args[2]);
        return Value::Undefined(
            "the inline if-expression evaluated to false and no else section was defined.");
      }
    }
    return Error(e, "unknown expression");
  }

  // Arguments after the first (the subject, or the callee).
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e) {
    CallArgs args;
    for (size_t i = 1; i < e.args.size(); ++i) {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [k, x] : e.kwargs) {
      ASSIGN_OR_RETURN(Value v, Eval(*x));
      args.keyword.emplace_back(k, std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> EvalGetItem(const Expr& e) {
    ASSIGN_OR_RETURN(const Value obj, Eval(*e.args[0]));
    ASSIGN_OR_RETURN(const Value key, Eval(*e.args[1]));
    if (obj.is_undefined()) return UndefinedError(e, obj);
    if (key.is_string()) return GetAttribute(obj, key.str());
    if (obj.is_dict()) {  // a number or None as the key ({0: 'a'}[0])
      if (absl::StatusOr<std::string> k = DictKey(key); k.ok()) {
        if (const Value* v = obj.Find(*k)) return *v;
      }
    }
    if (key.is_integer() && (obj.is_list() || obj.is_string())) {
      if (obj.is_string()) RETURN_IF_ERROR(budget_.SpendBytes(obj.str().size()));
      const size_t n = obj.is_list() ? obj.list().size() : py::Length(obj.str());
      int64_t i = key.int_value();
      if (i < 0) i += static_cast<int64_t>(n);
      if (i >= 0 && i < static_cast<int64_t>(n)) {
        return EvalSliceOf(obj, {static_cast<size_t>(i)}, true);
      }
    }
    std::string key_text;
    RETURN_IF_ERROR(AppendRepr(key, &key_text, 256));
    return Value::Undefined(StrCat(obj.is_none() ? "None" : StrCat("'", TypeName(obj), " object'"),
                                   " has no element ", key_text));
  }

  // obj[at...] as a list or string; or the one item when `single`.
  static Value EvalSliceOf(const Value& obj, const std::vector<size_t>& at, bool single = false) {
    if (single && obj.is_list()) return obj.list()[at[0]];
    if (obj.is_list()) {
      ValueList out;
      for (size_t i : at) out.push_back(obj.list()[i]);
      return Value::List(std::move(out), obj.is_tuple());
    }
    const std::vector<size_t> offsets = py::CodePointOffsets(obj.str());
    std::string out;
    for (size_t i : at) out.append(obj.str(), offsets[i], offsets[i + 1] - offsets[i]);
    return Value::String(std::move(out));
  }

  absl::StatusOr<Value> EvalSlice(const Expr& e) {
    ASSIGN_OR_RETURN(const Value obj, Eval(*e.args[0]));
    Value parts[3];
    for (int i = 0; i < 3; ++i) {
      parts[i] = Value::None();
      if (e.args[i + 1] != nullptr) {
        ASSIGN_OR_RETURN(parts[i], Eval(*e.args[i + 1]));
      }
    }
    if (obj.is_undefined()) return UndefinedError(e, obj);
    if (!obj.is_list() && !obj.is_string()) {
      return Error(e, StrCat("'", TypeName(obj), "' object is not subscriptable"));
    }
    const size_t n = obj.is_list() ? obj.list().size() : py::Length(obj.str());
    absl::StatusOr<std::vector<size_t>> at = SliceIndices(n, parts[0], parts[1], parts[2]);
    if (!at.ok()) return Located(e, at.status());
    RETURN_IF_ERROR(budget_.Spend(static_cast<int64_t>(at->size())));
    return EvalSliceOf(obj, *at);
  }

  absl::StatusOr<Value> EvalCall(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Kind::kGetAttr) {  // obj.method(...)
      ASSIGN_OR_RETURN(const Value obj, Eval(*callee.args[0]));
      if (obj.is_undefined()) return UndefinedError(callee, obj);
      ASSIGN_OR_RETURN(const CallArgs args, EvalArgs(e));
      absl::StatusOr<Value> v = CallMethod(obj, callee.name, args, &budget_);
      if (v.ok()) {
        RETURN_IF_ERROR(CheckValue(e, *v));
        return v;
      }
      if (v.status().code() != absl::StatusCode::kNotFound) return Located(e, v.status());
      const Value attr = GetAttribute(obj, callee.name);  // e.g. a macro kept in a namespace
      if (attr.kind() != Value::Kind::kCallable) return UndefinedError(e, attr);
      return CallFunction(e, attr, args);
    }
    ASSIGN_OR_RETURN(const Value fn, Eval(callee));
    if (fn.is_undefined()) return UndefinedError(e, fn);
    if (fn.kind() != Value::Kind::kCallable) {
      return Error(e, StrCat("'", TypeName(fn), "' object is not callable"));
    }
    ASSIGN_OR_RETURN(const CallArgs args, EvalArgs(e));
    return CallFunction(e, fn, args);
  }

  absl::StatusOr<Value> CallFunction(const Expr& e, const Value& fn, const CallArgs& args) {
    const Callable& c = fn.callable();
    if (c.macro != nullptr) return CallMacro(e, *c.macro, args);
    if (c.name == "raise_exception") {  // the template's own error: its message, unadorned
      std::string message;
      if (!args.positional.empty()) {
        RETURN_IF_ERROR(AppendStr(args.positional[0], &message, 64 << 10));
      }
      return absl::InvalidArgumentError(message);
    }
    for (const auto& [k, v] : args.keyword) {
      if (v.kind() == Value::Kind::kNamespace) {
        return Error(e, "a namespace cannot hold a namespace");
      }
    }
    absl::StatusOr<Value> v = CallGlobalFunction(c.name, args, &budget_);
    if (!v.ok()) return Located(e, v.status());
    return v;
  }

  // A macro runs in its own scope over the template's globals; its output is its value.
  absl::StatusOr<Value> CallMacro(const Expr& e, const Stmt& macro, const CallArgs& args) {
    const size_t n_params = macro.names.size();
    if (args.positional.size() > n_params) {
      return Error(e, StrCat("macro '", macro.text, "' takes ", n_params, " arguments"));
    }
    Frame params;
    for (size_t i = 0; i < n_params; ++i) {
      const Value* v = args.Get(i, macro.names[i]);
      const size_t first_default = n_params - macro.defaults.size();
      if (v != nullptr) {
        params[macro.names[i]] = *v;
      } else if (i >= first_default) {
        ASSIGN_OR_RETURN(params[macro.names[i]], Eval(*macro.defaults[i - first_default]));
      } else {
        params[macro.names[i]] = Value::Undefined(StrCat("'", macro.names[i], "' is undefined"));
      }
    }
    for (const auto& [k, v] : args.keyword) {
      if (std::find(macro.names.begin(), macro.names.end(), k) == macro.names.end()) {
        return Error(e, StrCat("macro '", macro.text, "' takes no keyword argument '", k, "'"));
      }
    }
    RETURN_IF_ERROR(budget_.Spend(static_cast<int64_t>(frames_.front().size())));  // the copy
    std::vector<Frame> saved = std::exchange(frames_, {frames_.front(), std::move(params)});
    std::string captured;
    std::string* saved_out = std::exchange(out_, &captured);
    absl::StatusOr<Flow> flow = ExecBlock(macro.body);
    out_ = saved_out;
    frames_ = std::move(saved);
    RETURN_IF_ERROR(flow.status());
    return Value::String(std::move(captured));
  }

  absl::StatusOr<Value> EvalBinary(const Expr& e, std::string_view op, const Value& a,
                                   const Value& b) {
    if (op == "==" || op == "!=") {
      const bool eq = Equals(a, b, budget_.steps_left());
      RETURN_IF_ERROR(budget_.Check());
      return Value::Bool((op == "==") == eq);
    }
    if (op == "in" || op == "not in") {
      CallArgs args;
      args.positional.push_back(b);
      absl::StatusOr<bool> in = ApplyTest("in", a, args, &budget_);
      if (!in.ok()) return Located(e, in.status());
      return Value::Bool((op == "in") == *in);
    }
    if (op == "~") {  // str() of each side; undefined is ""
      std::string out;
      RETURN_IF_ERROR(AppendStr(a, &out, budget_.limits().max_output_bytes));
      RETURN_IF_ERROR(AppendStr(b, &out, budget_.limits().max_output_bytes));
      RETURN_IF_ERROR(budget_.SpendBytes(out.size()));
      return Value::String(std::move(out));
    }
    if (a.is_undefined()) return UndefinedError(e, a);
    if (b.is_undefined()) return UndefinedError(e, b);
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      absl::StatusOr<int> c = Compare(a, b, budget_.steps_left());
      if (!c.ok()) return Located(e, c.status());
      RETURN_IF_ERROR(budget_.Check());
      return Value::Bool(op == "<" ? *c < 0 : op == "<=" ? *c <= 0 : op == ">" ? *c > 0 : *c >= 0);
    }
    if (op == "+" && a.is_string() && b.is_string()) {
      RETURN_IF_ERROR(budget_.CheckSize(a.str().size() + b.str().size()));
      RETURN_IF_ERROR(budget_.SpendBytes(a.str().size() + b.str().size()));
      if (a.is_markup() || b.is_markup()) {  // markupsafe escapes the plain side
        const std::string sum = (a.is_markup() ? a.str() : HtmlEscape(a.str())) +
                                (b.is_markup() ? b.str() : HtmlEscape(b.str()));
        RETURN_IF_ERROR(budget_.CheckSize(sum.size()));
        return Value::Markup(sum);
      }
      return Value::String(a.str() + b.str());
    }
    if (op == "+" && a.is_list() && b.is_list()) {
      RETURN_IF_ERROR(budget_.Spend(static_cast<int64_t>(a.list().size() + b.list().size())));
      ValueList out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value::List(std::move(out), a.is_tuple());
    }
    if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
      const Value& seq = a.is_integer() ? b : a;
      const Value& times = a.is_integer() ? a : b;
      if (!times.is_integer() || seq.is_integer()) return TypeMismatch(e, op, a, b);
      const size_t unit = seq.is_string() ? seq.str().size() : seq.list().size();
      // An empty sequence repeated is empty however often: no loop of `times` rounds.
      const auto n = unit == 0 ? 0 : static_cast<size_t>(std::max<int64_t>(0, times.int_value()));
      size_t total = 0;  // bytes or items; checked before anything is built
      if (__builtin_mul_overflow(unit, n, &total)) total = SIZE_MAX;
      if (seq.is_string()) {
        RETURN_IF_ERROR(budget_.CheckSize(total));
        RETURN_IF_ERROR(budget_.SpendBytes(total));
        std::string out;
        for (size_t i = 0; i < n; ++i) out += seq.str();
        return Value::String(std::move(out));
      }
      RETURN_IF_ERROR(budget_.Spend(static_cast<int64_t>(std::min<size_t>(total, INT64_MAX))));
      ValueList out;
      for (size_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
      return Value::List(std::move(out), seq.is_tuple());
    }
    if (!a.is_number() || !b.is_number()) return TypeMismatch(e, op, a, b);
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat || op == "/" ||
        (op == "**" && b.int_value() < 0)) {
      const double x = a.number(), y = b.number();
      if (y == 0 && (op == "/" || op == "//" || op == "%")) {
        return Error(e, "float division by zero");
      }
      if (op == "+") return Value::Float(x + y);
      if (op == "-") return Value::Float(x - y);
      if (op == "*") return Value::Float(x * y);
      if (op == "/") return Value::Float(x / y);
      if (op == "//") return Value::Float(std::floor(x / y));
      if (op == "%") {
        const double r = std::fmod(x, y);
        return Value::Float(r != 0 && ((r < 0) != (y < 0)) ? r + y : r);
      }
      if (x == 0 && y < 0) return Error(e, "0.0 cannot be raised to a negative power");
      const double p = std::pow(x, y);
      if (std::isinf(p) && std::isfinite(x) && std::isfinite(y)) {
        return Error(e, "numerical result out of range");
      }
      return Value::Float(p);
    }
    const int64_t x = a.int_value(), y = b.int_value();
    int64_t r = 0;
    bool overflow = false;
    if (op == "+") {
      overflow = __builtin_add_overflow(x, y, &r);
    } else if (op == "-") {
      overflow = __builtin_sub_overflow(x, y, &r);
    } else if (op == "*") {
      overflow = __builtin_mul_overflow(x, y, &r);
    } else if (op == "//" || op == "%") {
      if (y == 0) return Error(e, "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return Error(e, "integer overflow");
      r = op == "//" ? FloorDiv(x, y) : FloorMod(x, y);
    } else {  // ** with a non-negative exponent
      r = 1;
      for (int64_t i = 0; i < y && !overflow; ++i) {
        overflow = __builtin_mul_overflow(r, x, &r);
        if (x == 0 || x == 1) break;
        if (x == -1) {
          r = (y % 2 == 0) ? 1 : -1;
          break;
        }
      }
    }
    if (overflow) return Error(e, "integer overflow (tandem's integers are 64-bit)");
    return Value::Int(r);
  }

  static absl::Status TypeMismatch(const Expr& e, std::string_view op, const Value& a,
                                   const Value& b) {
    return Error(e, StrCat("unsupported operand type(s) for ", op, ": '", TypeName(a), "' and '",
                           TypeName(b), "'"));
  }

  Budget budget_;
  std::vector<Frame> frames_;   // innermost scope last; [0] holds the globals
  std::string* out_ = nullptr;  // where output goes (a capture buffer inside macros)
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<std::string> Interpret(const std::vector<Stmt>& program, const ValueDict& variables,
                                      const Limits& limits) {
  return Interpreter(variables, limits).Run(program);
}

}  // namespace tandem::tokenizer::jinja
