// The parsed template: expressions and statements as plain tagged structs (one struct per category, with the
// fields each kind uses noted beside it), owned by unique_ptr.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "diskformer/chat/value.h"

namespace df::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Const,     // value
    Name,      // name
    List,      // items
    Tuple,     // items
    Dict,      // items: key, value, key, value, ...
    Getattr,   // a.name
    Getitem,   // a[b]
    Slice,     // a[items[0]:items[1]:items[2]] (null parts absent)
    Call,      // a(items, kwargs)
    Filter,    // a | name(items, kwargs); a is null inside a filter block / block set
    Test,      // a is [not: negated] name(items, kwargs)
    Unary,     // op a: "-", "+", "not"
    Binary,    // a op b: + - * / // % ** ~ and or
    Compare,   // a (ops[k] items[k])...: == != < <= > >= in notin
    Cond,      // b if a else c (c may be null)
  };
  Kind kind;
  int line = 0, col = 0;
  int height = 1;  // longest path to a leaf; bounded by the parser (evaluation recurses along it)
  Value value;
  std::string name;
  std::string op;
  bool negated = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: no default
};

struct Stmt {
  enum class Kind {
    Data,      // text
    Output,    // {{ expr }}
    If,        // conds[k] -> bodies[k]; else_body
    For,       // for targets in expr [if cond] : body, else_body
    Set,       // targets = expr, or ns.attr (target_attr) = expr, or block set: body piped through filter (expr)
    Macro,     // name(params): body
    CallBlock, // {% call(params) expr %}body: expr called with caller() = body
    FilterBlock,  // body piped through expr (a Filter chain whose innermost `a` is null)
    With,      // targets[k] = values[k]; body
    Break,
    Continue,
  };
  Kind kind;
  int line = 0, col = 0;
  std::string text;
  ExprPtr expr, cond;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body, else_body;
  std::vector<std::string> targets;
  std::string target_attr;  // set ns.attr: targets[0] = "ns", target_attr = "attr"
  bool block_set = false;
  std::string name;
  std::vector<MacroParam> params;
  std::vector<ExprPtr> values;
};

namespace detail {
struct Program {
  std::string name;
  Body body;
};
}  // namespace detail

// Parses tokens (lexer.h) into a program; throws TemplateError with line and column.
struct Token;
void parse_program(const std::vector<Token>& tokens, detail::Program& out);

// Whether a filter / test of this name exists (the parser rejects unknown ones, as Jinja does at compile time).
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

}  // namespace df::chat
