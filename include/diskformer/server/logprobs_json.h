// A generated token's log-probabilities as JSON, in the shape of one entry of the OpenAI API's
// choices[].logprobs.content: {"id", "token", "logprob", "bytes", "top_logprobs": [{"id", "token", "logprob",
// "bytes"}]}. The server's responses and `run --n-probs` both write it, so the two can be compared field by field.
// "token" is the token's text (control tokens' own text included); "bytes" its exact bytes, which may be part of a
// character (JSON text cannot carry those: in "token" they are U+FFFD).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "diskformer/sampling/logprobs.h"
#include "diskformer/tokenizer/tokenizer.h"

namespace df::server {

nlohmann::ordered_json logprob_entry(const tokenizer::Tokenizer& tok, const sampling::StepLogprobs& lp);

// One compact line of JSON; bytes that are not UTF-8 become U+FFFD (a model may print any bytes).
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace df::server
