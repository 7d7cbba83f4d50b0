// chat's conversation: the messages, the tokens they render to with the model's template, and the context shift
// that keeps a chat going when its context is full: the oldest turns (a user message and the reply to it) are
// dropped whole and the system message stays, as llama.cpp keeps its first tokens and drops the oldest after them.
// What follows the system message is then evaluated again (no cached key is moved to a new position, so a shifted
// chat computes exactly what a fresh one would on the shorter conversation).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "diskformer/chat/template.h"
#include "diskformer/tokenizer/tokenizer.h"
#include "diskformer/util/result.h"

namespace df::cli {

class Conversation {
 public:
  // tpl and tok must outlive the conversation (and its copies).
  Conversation(const chat::Template& tpl, const tokenizer::Tokenizer& tok, const std::string& system);

  void add(const std::string& role, const std::string& content);
  void drop_last();  // a message that cannot be answered (longer than the context)
  // The conversation rendered with the generation prompt and tokenized as llama.cpp does (special tokens parsed;
  // BOS only where the template does not write it), then `reply`: the tokens of a reply generated so far.
  Result<std::vector<int32_t>> tokens(std::span<const int32_t> reply = {}) const;
  // Drops the oldest user message and the reply to it; false where only the system message and the last user
  // message are left.
  bool drop_oldest_turn();

 private:
  const chat::Template* tpl_;
  const tokenizer::Tokenizer* tok_;
  chat::ChatInput input_;
  size_t first_turn_ = 0;  // messages before it are the system message
};

}  // namespace df::cli
