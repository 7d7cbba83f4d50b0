// The generation loop shared by run and chat: evaluate a prompt, then sample and feed back one token at a
// time, with timings.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "diskformer/engine/session.h"
#include "diskformer/sampling/sampler.h"

namespace df::engine {

struct GenerateOptions {
  int32_t n_predict = 128;      // tokens to generate at most; < 0: until end-of-generation or the context is full
  bool ignore_eos = false;      // keep going past end-of-generation tokens
  sampling::SamplingParams sampling;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;
  int64_t gen_tokens = 0;       // tokens sampled (an end-of-generation token that stopped the loop included)
  int64_t decode_evals = 0;     // one-token forward passes after the prompt
  double gen_seconds = 0;       // time of sampling and those forward passes
  bool context_full = false;    // stopped because the context had no room left
  bool stopped_at_eog = false;
  double prompt_tok_s() const { return prompt_seconds > 0 ? double(prompt_tokens) / prompt_seconds : 0; }
  // Forward passes per second (the first token comes from the prompt's logits, so it is not counted).
  double gen_tok_s() const { return gen_seconds > 0 ? double(decode_evals) / gen_seconds : 0; }
};

struct GenerateHooks {
  std::function<bool(int32_t)> is_eog;        // nullptr: nothing ends generation but n_predict
  std::function<void(int32_t)> on_token;      // each generated token, end-of-generation excluded
};

// history holds the tokens the session has seen (for the repeat penalty); the prompt and the generated tokens are
// appended to it.
Result<GenerateStats> generate(Session& session, std::span<const int32_t> prompt, const GenerateOptions& options,
                               const GenerateHooks& hooks, std::vector<int32_t>& history);

// The process's peak resident set size in bytes (getrusage).
uint64_t peak_rss_bytes();

}  // namespace df::engine
