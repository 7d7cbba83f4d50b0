#include "cli/conversation.h"

namespace df::cli {

Conversation::Conversation(const chat::Template& tpl, const tokenizer::Tokenizer& tok, const std::string& system)
    : tpl_(&tpl), tok_(&tok) {
  input_.bos_token = tok.bos() >= 0 ? tok.token_to_piece(tok.bos(), true) : "";
  input_.eos_token = tok.eos() >= 0 ? tok.token_to_piece(tok.eos(), true) : "";
  if (!system.empty()) {
    input_.messages.push_back({{"role", "system"}, {"content", system}});
    first_turn_ = 1;
  }
}

void Conversation::add(const std::string& role, const std::string& content) {
  input_.messages.push_back({{"role", role}, {"content", content}});
}

void Conversation::drop_last() {
  if (input_.messages.size() > first_turn_) input_.messages.erase(input_.messages.end() - 1);
}

Result<std::vector<int32_t>> Conversation::tokens(std::span<const int32_t> reply) const {
  DF_ASSIGN(const std::string rendered, chat::render_chat(*tpl_, input_));
  // The template writes the BOS text itself where it wants one.
  const std::string& bos = input_.bos_token;
  const bool has_bos = !bos.empty() && rendered.rfind(bos, 0) == 0;
  std::vector<int32_t> ids = tok_->encode(rendered, {.add_bos = has_bos ? std::optional<bool>(false) : std::nullopt,
                                                    .parse_special = true});
  ids.insert(ids.end(), reply.begin(), reply.end());
  return ids;
}

bool Conversation::drop_oldest_turn() {
  auto& m = input_.messages;
  // The last message is the user's that is being answered: it stays.
  if (m.size() < first_turn_ + 2) return false;
  m.erase(m.begin() + long(first_turn_));  // the oldest user message
  if (m.size() > first_turn_ + 1 && m[first_turn_]["role"] == "assistant") m.erase(m.begin() + long(first_turn_));
  return true;
}

}  // namespace df::cli
