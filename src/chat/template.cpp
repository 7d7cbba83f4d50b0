#include "diskformer/chat/template.h"

#include "chat/ast.h"
#include "chat/interp.h"
#include "chat/lexer.h"

namespace df::chat {

Result<Template> Template::parse(std::string_view source, std::string name) {
  auto program = std::make_shared<detail::Program>();
  program->name = std::move(name);
  try {
    parse_program(tokenize(source), *program);
  } catch (const TemplateError& e) {
    return Error{program->name + ":" + std::to_string(e.line) + ":" + std::to_string(e.col) +
                 ": template syntax error: " + e.what()};
  } catch (const std::exception& e) {  // out of memory and the like
    return Error{program->name + ": cannot parse template: " + e.what()};
  }
  Template t;
  t.program_ = std::move(program);
  return t;
}

const std::string& Template::name() const { return program_->name; }

Result<std::string> Template::render(const Value& vars, const RenderOptions& options) const {
  if (!vars.is_dict()) return Error{program_->name + ": template variables must be a dict, got " + vars.type_name()};
  auto globals = std::make_shared<Scope>();
  add_globals(*globals, options);
  auto root = std::make_shared<Scope>(Scope{globals, {}});
  for (const auto& [k, v] : vars.dict->items)
    if (k.is_string()) root->set(k.s, v);
  Interp in(options, root);
  try {
    return in.run(program_->body);
  } catch (const TemplateError& e) {
    return Error{program_->name + ":" + std::to_string(in.line()) + ": " + e.what()};
  } catch (const std::exception& e) {
    return Error{program_->name + ":" + std::to_string(in.line()) + ": rendering failed: " + e.what()};
  }
}

Result<std::string> render_chat(const Template& tpl, const ChatInput& input, const RenderOptions& options) {
  if (!input.messages.is_array()) return Error{tpl.name() + ": messages must be a JSON array"};
  if (!input.extra.is_null() && !input.extra.is_object())
    return Error{tpl.name() + ": extra template variables must be a JSON object"};
  Value vars = Value::new_dict();
  auto& d = *vars.dict;
  auto messages = from_json(input.messages);
  if (!messages.ok()) return Error{tpl.name() + ": messages: " + messages.error().message};
  d.set(Value::string("messages"), std::move(messages).value());
  d.set(Value::string("tools"), Value::none());
  d.set(Value::string("documents"), Value::none());
  d.set(Value::string("add_generation_prompt"), Value::boolean(input.add_generation_prompt));
  d.set(Value::string("bos_token"), Value::string(input.bos_token));
  d.set(Value::string("eos_token"), Value::string(input.eos_token));
  if (input.extra.is_object())
    for (const auto& [k, v] : input.extra.items()) {
      auto value = from_json(v);
      if (!value.ok()) return Error{tpl.name() + ": " + k + ": " + value.error().message};
      d.set(Value::string(k), std::move(value).value());
    }
  return tpl.render(vars, options);
}

}  // namespace df::chat
