// Recursive descent over the token stream, in the shape of Jinja2's parser.py so that precedence and the
// odd corners (filters binding tighter than arithmetic, `is` tests taking one bare argument, conditional
// expressions without else) come out the same.
#include <algorithm>
#include <initializer_list>

#include "chat/ast.h"
#include "chat/error.h"
#include "chat/lexer.h"

namespace df::chat {

namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  Body parse_all() {
    Body body = subparse({});
    return body;
  }

 private:
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(pos_ + n, t_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Data: return "template data";
      case Tok::BlockBegin: return "begin of statement block";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::VarBegin: return "begin of print statement";
      case Tok::VarEnd: return "end of print statement";
      case Tok::Eof: return "end of template";
      case Tok::String: return "string";
      case Tok::Integer: return "integer";
      case Tok::Float: return "float";
      default: return "'" + t.value + "'";
    }
  }

  [[noreturn]] void fail_at(const Token& t, const std::string& msg) { throw TemplateError(msg, t.line, t.col); }
  [[noreturn]] void unexpected() { fail_at(cur(), "unexpected " + describe(cur())); }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail_at(cur(), std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail_at(cur(), "expected a name, got " + describe(cur()));
    std::string n = cur().value;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail_at(cur(), "expected end of statement block, got " + describe(cur()));
    next();
  }

  ExprPtr make(Expr::Kind k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  // ---- statements ----

  // Parses until a block tag whose first name is in `ends` (left unconsumed, positioned at that name).
  Body subparse(std::initializer_list<const char*> ends, const Token* opener = nullptr) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (ends.size() == 0) return body;
        std::string want;
        for (const char* e : ends) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
        fail_at(t, "unexpected end of template; looking for " + want +
                       (opener ? " to close the block opened at line " + std::to_string(opener->line) : ""));
      }
      if (t.type == Tok::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Data;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->line = t.line;
        s->col = t.col;
        s->expr = parse_tuple();
        if (cur().type != Tok::VarEnd) fail_at(cur(), "expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name)
          for (const char* e : ends)
            if (cur().value == e) return body;
        body.push_back(parse_statement());
      } else {
        unexpected();
      }
    }
  }

  std::unique_ptr<Stmt> stmt(Stmt::Kind k, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token tag = cur();
    if (tag.type != Tok::Name) fail_at(tag, "tag name expected");
    const std::string& n = tag.value;
    next();
    if (n == "if") return parse_if(tag);
    if (n == "for") return parse_for(tag);
    if (n == "set") return parse_set(tag);
    if (n == "macro") return parse_macro(tag);
    if (n == "call") return parse_call_block(tag);
    if (n == "filter") return parse_filter_block(tag);
    if (n == "with") return parse_with(tag);
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail_at(tag, "'" + n + "' outside of a for loop");
      expect_block_end();
      return stmt(n == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, tag);
    }
    fail_at(tag, "encountered unknown tag '" + n + "'");
  }

  // Consumes `endNAME %}`; subparse stopped on the name.
  void end_tag() {
    next();
    expect_block_end();
  }

  std::unique_ptr<Stmt> parse_if(const Token& tag) {
    auto s = stmt(Stmt::Kind::If, tag);
    s->conds.push_back(parse_tuple(false));
    expect_block_end();
    while (true) {
      s->bodies.push_back(subparse({"elif", "else", "endif"}, &tag));
      std::string which = cur().value;
      next();
      if (which == "elif") {
        s->conds.push_back(parse_tuple(false));
        expect_block_end();
      } else if (which == "else") {
        expect_block_end();
        s->else_body = subparse({"endif"}, &tag);
        next();
        expect_block_end();
        return s;
      } else {
        expect_block_end();
        return s;
      }
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = skip_op("(");
    names.push_back(expect_name());
    while (skip_op(",")) {
      if (cur().type != Tok::Name) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> parse_for(const Token& tag) {
    auto s = stmt(Stmt::Kind::For, tag);
    s->targets = parse_targets();
    if (!skip_name("in")) fail_at(cur(), "expected 'in' in for loop, got " + describe(cur()));
    s->expr = parse_tuple(false, true);
    if (skip_name("if")) s->cond = parse_tuple();
    if (skip_name("recursive")) fail_at(tag, "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = subparse({"endfor", "else"}, &tag);
    --loop_depth_;
    if (cur().value == "else") {
      next();
      expect_block_end();
      s->else_body = subparse({"endfor"}, &tag);
    }
    next();
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_set(const Token& tag) {
    auto s = stmt(Stmt::Kind::Set, tag);
    std::string first = expect_name();
    if (skip_op(".")) {
      s->targets.push_back(first);
      s->target_attr = expect_name();
    } else {
      s->targets.push_back(first);
      while (skip_op(",")) s->targets.push_back(expect_name());
    }
    if (skip_op("=")) {
      s->expr = parse_tuple();
      expect_block_end();
      return s;
    }
    if (s->targets.size() != 1) fail_at(cur(), "expected '=' after the names of a set");
    s->block_set = true;
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    expect_block_end();
    s->body = subparse({"endset"}, &tag);
    end_tag();
    return s;
  }

  void parse_params(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;  // trailing comma
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression();
      params.push_back(std::move(p));
    }
    next();
  }

  std::unique_ptr<Stmt> parse_macro(const Token& tag) {
    auto s = stmt(Stmt::Kind::Macro, tag);
    s->name = expect_name();
    parse_params(s->params);
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = subparse({"endmacro"}, &tag);
    loop_depth_ = saved;
    end_tag();
    return s;
  }

  std::unique_ptr<Stmt> parse_call_block(const Token& tag) {
    auto s = stmt(Stmt::Kind::CallBlock, tag);
    if (is_op("(")) parse_params(s->params);
    s->expr = parse_expression();
    if (s->expr->kind != Expr::Kind::Call) fail_at(tag, "expected a call after 'call'");
    expect_block_end();
    s->body = subparse({"endcall"}, &tag);
    end_tag();
    return s;
  }

  std::unique_ptr<Stmt> parse_filter_block(const Token& tag) {
    auto s = stmt(Stmt::Kind::FilterBlock, tag);
    // `{% filter upper | trim %}`: a filter chain applied to the body.
    s->expr = parse_filter_chain(nullptr, true);
    expect_block_end();
    s->body = subparse({"endfilter"}, &tag);
    end_tag();
    return s;
  }

  std::unique_ptr<Stmt> parse_with(const Token& tag) {
    auto s = stmt(Stmt::Kind::With, tag);
    while (cur().type != Tok::BlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect_name());
      expect_op("=");
      s->values.push_back(parse_expression());
    }
    expect_block_end();
    s->body = subparse({"endwith"}, &tag);
    end_tag();
    return s;
  }

  // ---- expressions ----

  // Comma-separated expressions become a tuple; one without a comma is itself.
  ExprPtr parse_tuple(bool with_condexpr = true, bool stop_at_for_keywords = false) {
    const Token at = cur();
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        comma = true;
      }
      if (cur().type == Tok::BlockEnd || cur().type == Tok::VarEnd || is_op(")") ||
          (stop_at_for_keywords && (is_name("if") || is_name("recursive"))))
        break;
      items.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    if (items.size() == 1 && !comma) return std::move(items[0]);
    if (items.empty() && !comma) fail_at(at, "expected an expression, got " + describe(at));
    auto t = make(Expr::Kind::Tuple, at);
    t->items = std::move(items);
    return t;
  }

  ExprPtr parse_expression() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const Token at = cur();
      next();
      auto c = make(Expr::Kind::Cond, at);
      c->a = parse_or();
      c->b = std::move(e);
      if (skip_name("else")) c->c = parse_expression();
      e = grown(std::move(c));
    }
    return e;
  }

  // Sets e's height from its operands; a chain like `a + a + ... + a` or `x|f|f|...|f` of thousands of links
  // is refused before evaluating it could exhaust the stack.
  ExprPtr grown(ExprPtr e) {
    for (const Expr* c : {e->a.get(), e->b.get(), e->c.get()})
      if (c) e->height = std::max(e->height, c->height + 1);
    if (e->height > kMaxHeight) throw TemplateError("expression too long", e->line, e->col);
    return e;
  }

  ExprPtr binary(const Token& at, const std::string& op, ExprPtr l, ExprPtr r) {
    auto e = make(Expr::Kind::Binary, at);
    e->op = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return grown(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const Token at = cur();
      next();
      l = binary(at, "or", std::move(l), parse_and());
    }
    return l;
  }

  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const Token at = cur();
      next();
      l = binary(at, "and", std::move(l), parse_not());
    }
    return l;
  }

  ExprPtr parse_not() {
    DepthGuard guard(*this);
    if (is_name("not")) {
      const Token at = cur();
      next();
      auto e = make(Expr::Kind::Unary, at);
      e->op = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token at = cur();
    ExprPtr l = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == "<=" ||
           cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == Tok::Name && peek().value == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::Compare, at);
        cmp->a = std::move(l);
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    if (cmp && cmp->items.size() > kMaxHeight) fail_at(at, "expression too long");
    return cmp ? std::move(cmp) : std::move(l);
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token at = cur();
      next();
      l = binary(at, at.value, std::move(l), parse_concat());
    }
    return l;
  }

  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      const Token at = cur();
      next();
      l = binary(at, "~", std::move(l), parse_math2());
    }
    return l;
  }

  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token at = cur();
      next();
      l = binary(at, at.value, std::move(l), parse_pow());
    }
    return l;
  }

  ExprPtr parse_pow() {
    ExprPtr l = parse_unary();
    while (is_op("**")) {
      const Token at = cur();
      next();
      l = binary(at, "**", std::move(l), parse_unary());
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    DepthGuard guard(*this);
    const Token at = cur();
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      next();
      e = make(Expr::Kind::Unary, at);
      e->op = at.value;
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token at = cur();
    if (at.type == Tok::Name) {
      next();
      if (at.value == "true" || at.value == "True" || at.value == "false" || at.value == "False") {
        auto e = make(Expr::Kind::Const, at);
        e->value = Value::boolean(at.value == "true" || at.value == "True");
        return e;
      }
      if (at.value == "none" || at.value == "None") {
        auto e = make(Expr::Kind::Const, at);
        e->value = Value::none();
        return e;
      }
      auto e = make(Expr::Kind::Name, at);
      e->name = at.value;
      return e;
    }
    if (at.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) {
        s += cur().value;
        next();
      }
      auto e = make(Expr::Kind::Const, at);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (at.type == Tok::Integer || at.type == Tok::Float) {
      next();
      auto e = make(Expr::Kind::Const, at);
      try {
        e->value = at.type == Tok::Integer ? Value::integer(std::stoll(at.value)) : Value::number(std::stod(at.value));
      } catch (const std::exception&) {
        fail_at(at, "number out of range: " + at.value);
      }
      return e;
    }
    if (skip_op("(")) {
      if (skip_op(")")) return make(Expr::Kind::Tuple, at);
      ExprPtr e = parse_tuple();
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto e = make(Expr::Kind::List, at);
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression());
      }
      next();
      return e;
    }
    if (skip_op("{")) {
      auto e = make(Expr::Kind::Dict, at);
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->items.push_back(parse_expression());
        expect_op(":");
        e->items.push_back(parse_expression());
      }
      next();
      return e;
    }
    unexpected();
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token at = cur();
      if (is_op(".")) {
        next();
        if (cur().type == Tok::Name) {
          auto g = make(Expr::Kind::Getattr, at);
          g->name = cur().value;
          g->a = std::move(e);
          next();
          e = grown(std::move(g));
        } else if (cur().type == Tok::Integer) {
          auto g = make(Expr::Kind::Getitem, at);
          g->a = std::move(e);
          g->b = make(Expr::Kind::Const, cur());
          g->b->value = Value::integer(std::stoll(cur().value));
          next();
          e = grown(std::move(g));
        } else {
          fail_at(cur(), "expected a name after '.', got " + describe(cur()));
        }
      } else if (is_op("[")) {
        next();
        e = grown(parse_subscript(std::move(e), at));
      } else if (is_op("(")) {
        e = grown(parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, const Token& at) {
    // a[i], a[i:j:k] (any part may be absent); a[i, j] is a tuple key.
    ExprPtr parts[3];
    int n = 0;
    bool is_slice = false;
    while (true) {
      if (is_op(":")) {
        is_slice = true;
        next();
        ++n;
        if (n > 2) fail_at(cur(), "too many ':' in a slice");
        continue;
      }
      if (is_op("]")) break;
      if (parts[n]) fail_at(cur(), "expected ':' or ']', got " + describe(cur()));
      parts[n] = is_slice || n > 0 ? parse_expression() : parse_tuple();
    }
    next();
    if (!is_slice) {
      if (!parts[0]) fail_at(at, "expected a subscript");
      auto g = make(Expr::Kind::Getitem, at);
      g->a = std::move(obj);
      g->b = std::move(parts[0]);
      return g;
    }
    auto s = make(Expr::Kind::Slice, at);
    s->a = std::move(obj);
    for (auto& p : parts) s->items.push_back(std::move(p));
    return s;
  }

  void parse_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (!e.items.empty() || !e.kwargs.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail_at(cur(), "*args and **kwargs in calls are not supported");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().value == "=") {
        std::string key = cur().value;
        next();
        next();
        e.kwargs.emplace_back(key, parse_expression());
      } else {
        if (!e.kwargs.empty()) fail_at(cur(), "positional argument after keyword argument");
        e.items.push_back(parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = make(Expr::Kind::Call, cur());
    c->a = std::move(callee);
    parse_args(*c);
    return c;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = grown(parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  // `| f1(args) | f2 ...`; with `leading`, the first filter has no `|` (filter blocks).
  ExprPtr parse_filter_chain(ExprPtr e, bool leading = false) {
    bool first = true;
    while ((first && leading) || skip_op("|")) {
      first = false;
      const Token at = cur();
      std::string name = expect_name();
      while (skip_op(".")) {
        name += '.';
        name += expect_name();
      }
      if (!has_filter(name)) fail_at(at, "no filter named '" + name + "'");
      auto f = make(Expr::Kind::Filter, at);
      f->name = name;
      f->a = std::move(e);
      if (is_op("(")) parse_args(*f);
      e = grown(std::move(f));
    }
    return e;
  }

  ExprPtr parse_test(ExprPtr e) {
    const Token at = cur();
    next();  // is
    bool negated = skip_name("not");
    const Token name_tok = cur();
    std::string name = expect_name();
    while (skip_op(".")) {
      name += '.';
      name += expect_name();
    }
    if (!has_test(name)) fail_at(name_tok, "no test named '" + name + "'");
    auto t = make(Expr::Kind::Test, at);
    t->name = name;
    t->negated = negated;
    t->a = std::move(e);
    if (is_op("(")) {
      parse_args(*t);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Integer ||
                cur().type == Tok::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_at(cur(), "you cannot chain multiple tests with is");
      t->items.push_back(parse_postfix(parse_primary()));
    }
    return grown(std::move(t));
  }

  // Nesting is bounded so that a hostile template cannot exhaust the stack (parse and render recurse on it).
  struct DepthGuard {
    DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxDepth) p.fail_at(p.cur(), "template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };
  static constexpr int kMaxDepth = 256;
  static constexpr int kMaxHeight = 2000;

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

void parse_program(const std::vector<Token>& tokens, detail::Program& out) {
  Parser p(tokens);
  out.body = p.parse_all();
}

}  // namespace df::chat
