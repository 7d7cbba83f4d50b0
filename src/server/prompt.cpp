#include "server/prompt.h"

namespace df::server {

Result<PromptBuilder> PromptBuilder::create(const gguf::File& file, const tokenizer::Tokenizer& tok,
                                            std::string source, std::string name) {
  bool from_model = false;
  if (source.empty()) {
    source = file.get_string_or("tokenizer.chat_template", "");
    from_model = !source.empty();
    if (from_model) {
      name += ":tokenizer.chat_template";
    } else {
      source = std::string(chat::chatml_template());
      name = "ChatML";
    }
  }
  DF_ASSIGN(chat::Template tpl, chat::Template::parse(source, name));
  PromptBuilder b(tok, std::move(tpl), from_model);
  b.bos_ = tok.bos() >= 0 ? tok.token_to_piece(tok.bos(), true) : "";
  b.eos_ = tok.eos() >= 0 ? tok.token_to_piece(tok.eos(), true) : "";
  return b;
}

Result<std::string> PromptBuilder::render(const nlohmann::ordered_json& messages) const {
  chat::ChatInput input;
  input.messages = messages;
  input.bos_token = bos_;
  input.eos_token = eos_;
  return chat::render_chat(tpl_, input);
}

std::optional<ApiError> PromptBuilder::build(const ApiRequest& req, std::vector<int32_t>& ids) const {
  if (req.endpoint == Endpoint::kChat) {
    auto text = render(req.messages);
    if (!text.ok())
      return bad_request("the chat template refused the conversation: " + text.error().message, "messages",
                         "template_error");
    // The template writes the BOS text itself where it wants one (as chat does).
    const bool has_bos = !bos_.empty() && text->rfind(bos_, 0) == 0;
    ids = tok_.encode(*text, {.add_bos = has_bos ? std::optional<bool>(false) : std::nullopt, .parse_special = true});
  } else if (req.prompt_ids) {
    ids = *req.prompt_ids;
    for (int32_t id : ids)
      if (id < 0 || size_t(id) >= tok_.n_vocab())
        return bad_request("'prompt' holds token id " + std::to_string(id) + ", outside the vocabulary of " +
                               std::to_string(tok_.n_vocab()),
                           "prompt", "invalid_value");
  } else {
    ids = tok_.encode(req.prompt, {.parse_special = true});
  }
  if (ids.empty()) return bad_request("the prompt has no tokens", req.endpoint == Endpoint::kChat ? "messages" : "prompt",
                                      "empty_prompt");
  return std::nullopt;
}

}  // namespace df::server
