// The OpenAI API's response objects: chat.completion and its stream's chat.completion.chunk, text_completion (whole
// and streamed), usage, and the log-probabilities of each in its endpoint's shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diskformer/tokenizer/tokenizer.h"
#include "server/job.h"
#include "server/request.h"

namespace df::server {

struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;      // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  int n_probs = -1;    // logprobs asked for
};

using ojson = nlohmann::ordered_json;

ojson usage_json(const JobResult& r);

// The whole reply (stream: false).
ojson completion_json(const tokenizer::Tokenizer& tok, const ResponseMeta& m, const std::string& text,
                      const std::vector<TokenOut>& tokens, const JobResult& r);

// Stream chunks: the first of a chat stream (the role), one per event, the last (finish_reason), the usage chunk.
ojson role_chunk(const ResponseMeta& m);
ojson delta_chunk(const tokenizer::Tokenizer& tok, const ResponseMeta& m, const JobEvent& e, size_t text_offset);
ojson finish_chunk(const ResponseMeta& m, const JobResult& r);
ojson usage_chunk(const ResponseMeta& m, const JobResult& r);

}  // namespace df::server
