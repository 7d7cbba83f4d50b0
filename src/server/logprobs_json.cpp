#include "diskformer/server/logprobs_json.h"

namespace df::server {

namespace {

nlohmann::ordered_json token_json(const tokenizer::Tokenizer& tok, const sampling::TokenLogprob& t) {
  const std::string piece = tok.token_to_piece(t.id, /*render_special=*/true);
  nlohmann::ordered_json bytes = nlohmann::ordered_json::array();
  for (unsigned char c : piece) bytes.push_back(int(c));
  return {{"id", t.id}, {"token", piece}, {"logprob", t.logprob}, {"bytes", std::move(bytes)}};
}

}  // namespace

nlohmann::ordered_json logprob_entry(const tokenizer::Tokenizer& tok, const sampling::StepLogprobs& lp) {
  nlohmann::ordered_json e = token_json(tok, lp.chosen);
  nlohmann::ordered_json top = nlohmann::ordered_json::array();
  for (const auto& t : lp.top) top.push_back(token_json(tok, t));
  e["top_logprobs"] = std::move(top);
  return e;
}

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace df::server
