// The syntax tree of a parsed Jinja template.
//
// Built once by the parser and then read-only: the interpreter walks it without
// changing it, so one tree may be rendered from several threads at once. Nodes own
// their children. Every node keeps the source line/column it came from, for errors.
// The parser bounds the tree's depth, so recursive walks (and destruction) stay shallow.
#ifndef TANDEM_COMMON_TOKENIZER_JINJA_AST_H_
#define TANDEM_COMMON_TOKENIZER_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/tokenizer/jinja/value.h"

namespace tandem::tokenizer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // [args...]; (args...) when name is "tuple"
    kDict,     // {args[0]: args[1], args[2]: args[3], ...}
    kGetAttr,  // args[0].name
    kGetItem,  // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]], absent parts null
    kCall,     // args[0](args[1:]..., kwargs)
    kFilter,   // args[0] | name(args[1:]..., kwargs)
    kTest,     // args[0] is name(args[1:]...)
    kUnary,    // name ("-", "+", "not") args[0]
    kBinary,   // args[0] name args[1]: arithmetic, "~", comparisons, "in", "not in"
    kCompare,  // a chain, args[0] ops[0] args[1] ops[1] args[2] ...: each pair must hold
    kAnd,      // args[0] and args[1]
    kOr,       // args[0] or args[1]
    kCond,     // args[1] if args[0] else args[2] (null: undefined)
  };
  Kind kind;
  int line = 0, column = 0;
  int depth = 1;  // 1 + the deepest child
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
};

// The name a filter block's expression reads its rendered body from (no template can
// spell it: names have no spaces).
inline constexpr std::string_view kFilterBody = " filter body";

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // if expr: body, else else_body (elif is a nested kIf there)
    kFor,          // for names in expr [if filter]: body, else else_body
    kSet,          // set names = expr; or set target.name = expr (target set)
    kSetBlock,     // set names[0] %} body {% endset
    kFilterBlock,  // filter f | g %} body {% endfilter: expr applies f, g to kFilterBody
    kMacro,        // macro name(names, defaults for the last ones) body
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0, column = 0;
  std::string text;                // kText; kMacro and attribute kSet: the name
  ExprPtr expr;                    // value, condition or iterable
  ExprPtr target;                  // kSet of an attribute: the namespace expression
  ExprPtr filter;                  // kFor: `if` condition, or null
  std::vector<std::string> names;  // assigned / loop / parameter names
  std::vector<ExprPtr> defaults;   // kMacro: defaults of the last parameters
  std::vector<Stmt> body, else_body;
};

}  // namespace tandem::tokenizer::jinja

#endif  // TANDEM_COMMON_TOKENIZER_JINJA_AST_H_
