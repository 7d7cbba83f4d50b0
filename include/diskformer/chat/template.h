// Chat templates: the subset of Jinja2 that real models' `tokenizer.chat_template` uses, rendered exactly as
// Jinja2 3.1.6 renders them under Hugging Face's settings (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loopcontrols, tojson with ensure_ascii=False, raise_exception, strftime_now).
//
//   DF_ASSIGN(auto tpl, df::chat::Template::parse(source, "model.gguf"));
//   DF_ASSIGN(std::string prompt, df::chat::render_chat(tpl, {.messages = msgs, .bos_token = "<s>"}));
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "diskformer/chat/value.h"
#include "diskformer/util/result.h"

namespace df::chat {

namespace detail {
struct Program;
}

struct RenderOptions {
  // The local time strftime_now() formats; the real clock where absent.
  std::optional<std::tm> now;
  // Hugging Face renders in an immutable sandbox, where list.append / dict.update are refused with a
  // SecurityError; true allows them (some templates, e.g. Kimi-K2's tool calls, need them).
  bool allow_mutation = false;
};

class Template {
 public:
  // A malformed template is an Error "NAME:LINE:COL: what".
  static Result<Template> parse(std::string_view source, std::string name = "template");

  // `vars` must be a dict; its keys become the template's variables. Errors (raise_exception, a type error,
  // undefined access) are an Error "NAME:LINE: what"; raise_exception's text is kept verbatim.
  Result<std::string> render(const Value& vars, const RenderOptions& options = {}) const;

  const std::string& name() const;

 private:
  std::shared_ptr<const detail::Program> program_;
};

struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // Further variables (tools, enable_thinking, ...): an object, or null. They may override the defaults below.
  nlohmann::ordered_json extra;
  std::string bos_token, eos_token;
  bool add_generation_prompt = true;
};

// The template used where a model has no tokenizer.chat_template: ChatML, as llama.cpp falls back to it.
std::string_view chatml_template();

// Renders as transformers' apply_chat_template does: messages, tools (None unless given), bos/eos tokens,
// add_generation_prompt, then the extra variables.
Result<std::string> render_chat(const Template& tpl, const ChatInput& input, const RenderOptions& options = {});

}  // namespace df::chat
