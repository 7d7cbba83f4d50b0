#include "server/responses.h"

#include "diskformer/server/logprobs_json.h"

namespace df::server {

namespace {

// Chat: {"content": [entry, ...]}.
ojson chat_logprobs(const tokenizer::Tokenizer& tok, const std::vector<TokenOut>& tokens) {
  ojson content = ojson::array();
  for (const TokenOut& t : tokens) content.push_back(logprob_entry(tok, t.logprobs));
  return {{"content", std::move(content)}};
}

// Completions (the legacy shape): parallel arrays, top_logprobs as {token: logprob} maps.
ojson completion_logprobs(const tokenizer::Tokenizer& tok, const std::vector<TokenOut>& tokens, size_t offset) {
  ojson toks = ojson::array(), lps = ojson::array(), tops = ojson::array(), offs = ojson::array();
  for (const TokenOut& t : tokens) {
    const std::string piece = tok.token_to_piece(t.id, true);
    toks.push_back(piece);
    lps.push_back(t.logprobs.chosen.logprob);
    ojson top = ojson::object();
    for (const auto& a : t.logprobs.top) top[tok.token_to_piece(a.id, true)] = a.logprob;
    tops.push_back(std::move(top));
    offs.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

ojson logprobs_of(const tokenizer::Tokenizer& tok, const ResponseMeta& m, const std::vector<TokenOut>& tokens,
                  size_t offset) {
  if (m.n_probs < 0) return nullptr;
  return m.endpoint == Endpoint::kChat ? chat_logprobs(tok, tokens) : completion_logprobs(tok, tokens, offset);
}

ojson head(const ResponseMeta& m, bool chunk) {
  const char* object = m.endpoint == Endpoint::kChat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                     : "text_completion";
  return {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}};
}

}  // namespace

ojson usage_json(const JobResult& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

ojson completion_json(const tokenizer::Tokenizer& tok, const ResponseMeta& m, const std::string& text,
                      const std::vector<TokenOut>& tokens, const JobResult& r) {
  ojson j = head(m, false);
  ojson choice = {{"index", 0}};
  if (m.endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs_of(tok, m, tokens, 0);
  choice["finish_reason"] = r.finish_reason;
  j["choices"] = ojson::array({std::move(choice)});
  j["usage"] = usage_json(r);
  return j;
}

ojson role_chunk(const ResponseMeta& m) {
  ojson j = head(m, true);
  j["choices"] = ojson::array(
      {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
        {"finish_reason", nullptr}}});
  return j;
}

ojson delta_chunk(const tokenizer::Tokenizer& tok, const ResponseMeta& m, const JobEvent& e, size_t text_offset) {
  ojson j = head(m, true);
  ojson choice = {{"index", 0}};
  if (m.endpoint == Endpoint::kChat) {
    choice["delta"] = {{"content", e.text}};
  } else {
    choice["text"] = e.text;
  }
  choice["logprobs"] = logprobs_of(tok, m, e.tokens, text_offset);
  choice["finish_reason"] = nullptr;
  j["choices"] = ojson::array({std::move(choice)});
  return j;
}

ojson finish_chunk(const ResponseMeta& m, const JobResult& r) {
  ojson j = head(m, true);
  ojson choice = {{"index", 0}};
  if (m.endpoint == Endpoint::kChat) {
    choice["delta"] = ojson::object();
  } else {
    choice["text"] = "";
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = r.finish_reason;
  j["choices"] = ojson::array({std::move(choice)});
  return j;
}

ojson usage_chunk(const ResponseMeta& m, const JobResult& r) {
  ojson j = head(m, true);
  j["choices"] = ojson::array();
  j["usage"] = usage_json(r);
  return j;
}

}  // namespace df::server
