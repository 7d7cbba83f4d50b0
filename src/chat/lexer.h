// Template source -> tokens, following Jinja2's lexer: data between tags, `{{ }}` / `{% %}` / `{# #}` with the
// `-` and `+` whitespace controls, trim_blocks (drop the newline after a block or comment tag) and lstrip_blocks
// (drop spaces and tabs before a block or comment tag at the start of a line), raw blocks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace df::chat {

enum class Tok {
  Data,        // text; value holds it
  BlockBegin,  // {%
  BlockEnd,    // %}
  VarBegin,    // {{
  VarEnd,      // }}
  Name,
  String,      // value holds the unescaped text
  Integer,
  Float,
  Op,          // value holds the operator: "+", "//", "==", "(", ...
  Eof,
};

struct Token {
  Tok type;
  std::string value;
  int line = 1, col = 1;
};

// Throws TemplateError with the line and column of the offending character.
std::vector<Token> tokenize(std::string_view source);

}  // namespace df::chat
