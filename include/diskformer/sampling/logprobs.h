// Log-probabilities of a step: the chosen token's and the n most likely tokens', from the raw logits (the model's
// own distribution, before the repeat penalty, top-k, top-p, min-p or temperature change it), as the server's
// logprobs / top_logprobs and run --n-probs report them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace df::sampling {

struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0;  // natural log
};

struct StepLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // the n most likely, best first (ties: the lower id first)
};

// log p(i) = logits[i] - max - log(sum_j exp(logits[j] - max)), the sum in double. n_top is clamped to the
// vocabulary; chosen must be an index of logits.
StepLogprobs step_logprobs(std::span<const float> logits, int32_t chosen, int n_top);

}  // namespace df::sampling
