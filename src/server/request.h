// The body of POST /v1/chat/completions and /v1/completions, checked field by field: the fields the OpenAI API
// defines that a local model can honour (and llama-server's top_k, min_p, repeat_penalty and ignore_eos), each of
// the right type and range. Anything else a client may send (user, metadata, ...) is ignored; fields whose meaning
// this server cannot give (n > 1, tools, logit_bias, presence or frequency penalties) are refused by name rather
// than silently dropped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace df::server {

enum class Endpoint { kChat, kCompletion };

struct SamplingOverrides {
  std::optional<float> temperature, top_p, min_p, repeat_penalty;
  std::optional<int32_t> top_k;
  std::optional<int64_t> seed;  // < 0: a random seed
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                                // as the client named it (echoed back)
  nlohmann::ordered_json messages;                  // chat: role and content (text) of each message
  std::string prompt;                               // completions: the prompt text ...
  std::optional<std::vector<int32_t>> prompt_ids;   // ... or its token ids
  bool stream = false;
  bool include_usage = false;                       // stream_options.include_usage
  std::optional<int64_t> max_tokens;                // >= 1
  SamplingOverrides sampling;
  std::vector<std::string> stop;                    // up to 16 non-empty strings
  std::optional<bool> ignore_eos;
  int n_probs = -1;                                 // logprobs: alternatives per token (0..20); -1: none
};

// The deepest nesting of arrays and objects the parser accepts (deeper input is refused before it is parsed).
constexpr int kMaxJsonDepth = 64;

// nullopt on success (out filled), else the error to answer with.
std::optional<ApiError> parse_request(Endpoint endpoint, std::string_view body, ApiRequest& out);

}  // namespace df::server
