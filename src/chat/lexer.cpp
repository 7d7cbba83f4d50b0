#include "chat/lexer.h"

#include <cstring>

#include "chat/error.h"
#include "chat/text.h"

namespace df::chat {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Length of the whitespace run (Python's str.isspace, any code point) starting at / ending at a byte index.
size_t ws_after(const std::string& s, size_t pos) {
  size_t k = pos;
  while (k < s.size()) {
    size_t n = 1;
    auto c = static_cast<unsigned char>(s[k]);
    if (c >= 0x80) n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    std::u32string u = text::decode(std::string_view(s).substr(k, n));
    if (u.size() != 1 || !text::is_space(u[0])) break;
    k += n;
  }
  return k - pos;
}

size_t rstrip_len(const std::string& s) {  // s.size() minus its trailing whitespace
  size_t e = s.size();
  while (e > 0) {
    size_t b = e - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    std::u32string u = text::decode(std::string_view(s).substr(b, e - b));
    if (u.size() != 1 || !text::is_space(u[0])) break;
    e = b;
  }
  return e;
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;  // the text consumed last ended with a newline (or nothing was consumed yet)
    while (pos_ < s_.size()) {
      size_t open = find_open(pos_);
      if (open == std::string::npos) {
        emit_data(s_.substr(pos_), pos_);
        advance_to(s_.size());
        break;
      }
      char kind = s_[open + 1];  // '{', '%' or '#'
      char sign = open + 2 < s_.size() && (s_[open + 2] == '-' || s_[open + 2] == '+') ? s_[open + 2] : 0;
      std::string text = s_.substr(pos_, open - pos_);
      if (sign == '-') {
        text.resize(rstrip_len(text));
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: only whitespace between the line start and the tag.
        size_t l = text.rfind('\n');
        size_t lpos = l == std::string::npos ? 0 : l + 1;
        if (lpos > 0 || line_starting) {
          bool blank = true;
          for (size_t k = lpos; k < text.size(); ++k)
            if (text[k] != ' ' && text[k] != '\t') blank = false;
          if (blank) text.resize(lpos);
        }
      }
      emit_data(text, pos_);
      advance_to(open);
      size_t body = open + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        lex_comment(open, body);
      } else if (kind == '%' && try_raw(open, body)) {
        // raw block emitted as data
      } else {
        lex_tag(kind == '%', open, body);
      }
      line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
    }
    tokens_.push_back({Tok::Eof, "", line_, col()});
    return std::move(tokens_);
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t k = from; k + 1 < s_.size(); ++k)
      if (s_[k] == '{' && (s_[k + 1] == '{' || s_[k + 1] == '%' || s_[k + 1] == '#')) return k;
    return std::string::npos;
  }

  int col() const { return static_cast<int>(pos_ - line_start_) + 1; }

  void advance_to(size_t p) {
    for (size_t k = pos_; k < p; ++k)
      if (s_[k] == '\n') {
        ++line_;
        line_start_ = k + 1;
      }
    pos_ = p;
  }

  void emit_data(const std::string& text, size_t at) {
    if (text.empty()) return;
    tokens_.push_back({Tok::Data, text, line_, static_cast<int>(at - line_start_) + 1});
  }

  [[noreturn]] void error(const std::string& msg, size_t at) {
    advance_to(at);
    throw TemplateError(msg, line_, col());
  }

  // After a closing `%}` or `#}` at `end` (index just past it): trim_blocks drops one newline; `-%}` dropped
  // all whitespace already.
  size_t after_close(size_t end, char sign) const {
    if (sign == '-') {
      end += ws_after(s_, end);
    } else if (sign != '+' && end < s_.size() && s_[end] == '\n') {
      ++end;
    }
    return end;
  }

  void lex_comment(size_t open, size_t body) {
    size_t close = s_.find("#}", body);
    if (close == std::string::npos) error("missing end of comment tag", open);
    char sign = close > body && (s_[close - 1] == '-' || s_[close - 1] == '+') ? s_[close - 1] : 0;
    advance_to(after_close(close + 2, sign));
  }

  // `{% raw %}...{% endraw %}`: everything between is data.
  bool try_raw(size_t open, size_t body) {
    size_t k = body;
    while (k < s_.size() && is_ws(s_[k])) ++k;
    if (s_.compare(k, 3, "raw") != 0 || (k + 3 < s_.size() && is_name_char(s_[k + 3]))) return false;
    k += 3;
    while (k < s_.size() && is_ws(s_[k])) ++k;
    size_t start;
    if (s_.compare(k, 3, "-%}") == 0) {
      start = k + 3;
      start += ws_after(s_, start);
    } else if (s_.compare(k, 2, "%}") == 0) {
      start = k + 2;
    } else {
      return false;
    }
    // Find `{%[-+]? endraw [-+]?%}`.
    for (size_t f = s_.find("{%", start); f != std::string::npos; f = s_.find("{%", f + 2)) {
      size_t q = f + 2;
      char sign = q < s_.size() && (s_[q] == '-' || s_[q] == '+') ? s_[q] : 0;
      if (sign) ++q;
      while (q < s_.size() && is_ws(s_[q])) ++q;
      if (s_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < s_.size() && is_ws(s_[q])) ++q;
      char esign = q < s_.size() && (s_[q] == '-' || s_[q] == '+') ? s_[q] : 0;
      if (esign) ++q;
      if (s_.compare(q, 2, "%}") != 0) continue;
      std::string text = s_.substr(start, f - start);
      if (sign == '-') {
        text.resize(rstrip_len(text));
      } else if (sign != '+') {
        size_t l = text.rfind('\n');
        size_t lpos = l == std::string::npos ? 0 : l + 1;
        bool blank = true;
        for (size_t t = lpos; t < text.size(); ++t)
          if (text[t] != ' ' && text[t] != '\t') blank = false;
        if (blank && lpos > 0) text.resize(lpos);
      }
      advance_to(start);
      emit_data(text, start);
      advance_to(after_close(q + 2, esign));
      return true;
    }
    error("missing end of raw directive", open);
  }

  void lex_tag(bool block, size_t open, size_t body) {
    tokens_.push_back({block ? Tok::BlockBegin : Tok::VarBegin, "", line_, col()});
    advance_to(body);
    int depth = 0;  // open brackets: an end tag inside them is not an end tag (as Jinja's balancing stack)
    const char* close = block ? "%}" : "}}";
    while (true) {
      if (pos_ >= s_.size()) error(block ? "unexpected end of template inside a block tag '{%'"
                                         : "unexpected end of template inside a variable tag '{{'", pos_);
      if (depth == 0) {
        if ((s_[pos_] == '-' || (block && s_[pos_] == '+')) && s_.compare(pos_ + 1, 2, close) == 0) {
          tokens_.push_back({block ? Tok::BlockEnd : Tok::VarEnd, "", line_, col()});
          advance_to(block ? after_close(pos_ + 3, s_[pos_]) : after_close(pos_ + 3, '-'));
          return;
        }
        if (s_.compare(pos_, 2, close) == 0) {
          tokens_.push_back({block ? Tok::BlockEnd : Tok::VarEnd, "", line_, col()});
          advance_to(block ? after_close(pos_ + 2, 0) : pos_ + 2);
          return;
        }
      }
      char c = s_[pos_];
      if (is_ws(c)) {
        advance_to(pos_ + 1);
        continue;
      }
      int line = line_, column = col();
      if (is_digit(c)) {
        lex_number(line, column);
      } else if (is_name_start(c)) {
        size_t e = pos_;
        while (e < s_.size() && is_name_char(s_[e])) ++e;
        tokens_.push_back({Tok::Name, s_.substr(pos_, e - pos_), line, column});
        advance_to(e);
      } else if (c == '\'' || c == '"') {
        lex_string(line, column);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* t : two)
          if (s_.compare(pos_, 2, t) == 0) op = t;
        if (op.empty()) {
          if (!std::strchr("+-*/%~[](){}><=.:|,;", c)) error(std::string("unexpected char '") + c + "'", pos_);
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        tokens_.push_back({Tok::Op, op, line, column});
        advance_to(pos_ + op.size());
      }
    }
  }

  void lex_number(int line, int column) {
    auto digits = [&](size_t k) {  // \d+(_\d+)*
      while (k < s_.size() && (is_digit(s_[k]) || (s_[k] == '_' && k + 1 < s_.size() && is_digit(s_[k + 1])))) ++k;
      return k;
    };
    size_t e = digits(pos_);
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && is_digit(s_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t k = e + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && is_digit(s_[k])) {
        e = digits(k);
        is_float = true;
      }
    }
    std::string v;
    for (size_t k = pos_; k < e; ++k)
      if (s_[k] != '_') v.push_back(s_[k]);
    tokens_.push_back({is_float ? Tok::Float : Tok::Integer, v, line, column});
    advance_to(e);
  }

  void lex_string(int line, int column) {
    char q = s_[pos_];
    size_t k = pos_ + 1;
    std::string out;
    while (true) {
      if (k >= s_.size()) error("unterminated string", pos_);
      char c = s_[k];
      if (c == q) break;
      if (c != '\\' || k + 1 >= s_.size()) {
        out.push_back(c);
        ++k;
        continue;
      }
      char e = s_[k + 1];
      k += 2;
      auto hexval = [&](int n) -> long {
        if (k + n > s_.size()) return -1;
        long v = 0;
        for (int t = 0; t < n; ++t) {
          char h = s_[k + t];
          int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
          if (d < 0) return -1;
          v = v * 16 + d;
        }
        k += n;
        return v;
      };
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          long v = hexval(e == 'x' ? 2 : e == 'u' ? 4 : 8);
          if (v < 0) error("truncated \\" + std::string(1, e) + " escape in string", k);
          text::append_utf8(out, static_cast<char32_t>(v));
          break;
        }
        default:  // Python keeps unknown escapes as written
          out.push_back('\\');
          out.push_back(e);
      }
    }
    tokens_.push_back({Tok::String, out, line, column});
    advance_to(k + 1);
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  // Jinja normalizes newlines to \n and drops one trailing newline (keep_trailing_newline=False).
  std::string s;
  s.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      s.push_back('\n');
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      s.push_back(source[k]);
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s)).run();
}

}  // namespace df::chat
