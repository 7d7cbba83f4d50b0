// Picks the next token from logits: greedy at temperature 0, otherwise llama.cpp's chain of logit bias (banned
// tokens), repeat penalty, top-k, top-p, min-p, temperature, then a seeded draw.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace df::sampling {

struct SamplingParams {
  float temp = 0.8f;            // <= 0: greedy (argmax, the lowest id on ties)
  int32_t top_k = 40;           // <= 0: all
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off; keeps tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;  // 1: off; divides positive (multiplies negative) logits of recent tokens
  int32_t repeat_last_n = 64;   // how many recent tokens the penalty looks at
  uint64_t seed = 0;
  // Ids whose logit is -inf before anything else, so that no setting can choose them: llama.cpp's logit bias, which
  // --ignore-eos sets for every end-of-generation token. Ids outside the vocabulary are ignored.
  std::vector<int32_t> banned;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  // history: the tokens so far (prompt and generated), for the repeat penalty.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The same choice as sample() when `top` holds the min(top_k, n_vocab) best candidates of the full logits after
  // the bans and the repeat penalty, as (penalized logit, id) in any order (ties at the cut: the lower ids); at temperature 0 any
  // set that contains the best one. Lets a backend do the work that scales with the vocabulary elsewhere (the GPU)
  // and draw here with the same random stream: equal seeds give equal tokens.
  int32_t sample_top_k(std::span<const std::pair<float, int32_t>> top);
  const SamplingParams& params() const { return p_; }

 private:
  // Top-p, min-p, temperature and the seeded draw over cand_, sorted best first.
  int32_t draw();

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace df::sampling
