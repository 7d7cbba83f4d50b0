// Errors inside the template engine. Rendering recurses through expressions, macros and loops, and almost any
// step can fail (a type error, undefined access, raise_exception), so the engine throws this one type and the
// public entry points (template.cpp) turn it into a df::Error; nothing throws across the public API.
#pragma once

#include <stdexcept>
#include <string>

namespace df::chat {

struct TemplateError : std::runtime_error {
  // line 0: not known yet; the statement being executed fills it in on the way out.
  explicit TemplateError(const std::string& message, int line = 0, int col = 0)
      : std::runtime_error(message), line(line), col(col) {}
  int line, col;
};

[[noreturn]] inline void fail(const std::string& message) { throw TemplateError(message); }

}  // namespace df::chat
