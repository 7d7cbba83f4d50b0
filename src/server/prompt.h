// A request's prompt as token ids: chat messages rendered with the model's chat template (ChatML where it has none,
// or the template given to serve) and tokenized as `chat` does; a completion's text tokenized as `run` does, so
// that the same prompt gives the same ids, and so the same reply, as those commands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "diskformer/chat/template.h"
#include "diskformer/tokenizer/tokenizer.h"
#include "diskformer/util/result.h"
#include "server/api_error.h"
#include "server/request.h"

namespace df::server {

class PromptBuilder {
 public:
  // template_source empty: the GGUF's tokenizer.chat_template, else ChatML. Errors: a template that does not parse.
  static Result<PromptBuilder> create(const gguf::File& file, const tokenizer::Tokenizer& tok,
                                      std::string template_source, std::string template_name);

  // The ids of the request's prompt; an error for a template that refuses the conversation (raise_exception, with
  // its text), or token ids outside the vocabulary.
  std::optional<ApiError> build(const ApiRequest& req, std::vector<int32_t>& ids) const;
  // The text the template makes of a conversation (with the generation prompt).
  Result<std::string> render(const nlohmann::ordered_json& messages) const;
  bool uses_model_template() const { return from_model_; }

 private:
  PromptBuilder(tokenizer::Tokenizer tok, chat::Template tpl, bool from_model)
      : tok_(std::move(tok)), tpl_(std::move(tpl)), from_model_(from_model) {}
  tokenizer::Tokenizer tok_;
  chat::Template tpl_;
  bool from_model_ = false;
  std::string bos_, eos_;
};

}  // namespace df::server
