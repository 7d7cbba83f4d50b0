// The generation loop shared by run and chat: evaluate a prompt, then sample and feed back one token at a
// time, with timings.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "diskformer/engine/session.h"
#include "diskformer/sampling/sampler.h"

namespace df::engine {

struct GenerateOptions {
  int32_t n_predict = 128;      // tokens to generate at most; < 0: until end-of-generation or the context is full
  // End-of-generation tokens are never chosen (llama.cpp's --ignore-eos: a logit bias of -inf for every id that
  // hooks.is_eog names), so generation goes on to n_predict or a full context.
  bool ignore_eos = false;
  sampling::SamplingParams sampling;
};

// Why the loop ended: n_predict tokens, an end-of-generation token, no room left in the context, hooks.stop.
enum class StopReason { kPredicted, kEndOfGeneration, kContextFull, kStopped };
const char* stop_reason_name(StopReason r);  // "n_predict", "eog", "context", "stopped"

struct GenerateStats {
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;
  int64_t gen_tokens = 0;       // tokens sampled (an end-of-generation token that stopped the loop included)
  int64_t decode_evals = 0;     // one-token forward passes after the prompt
  double gen_seconds = 0;       // time of sampling and those forward passes
  StopReason stop = StopReason::kPredicted;
  double prompt_tok_s() const { return prompt_seconds > 0 ? double(prompt_tokens) / prompt_seconds : 0; }
  // Forward passes per second (the first token comes from the prompt's logits, so it is not counted); nullopt
  // without any (one generated token): a rate of nothing is not zero.
  std::optional<double> gen_tok_s() const {
    if (decode_evals == 0 || gen_seconds <= 0) return std::nullopt;
    return double(decode_evals) / gen_seconds;
  }
  // Sums of two parts of one reply (a chat's reply continued after its context shifted).
  GenerateStats& operator+=(const GenerateStats& o);
};

struct GenerateHooks {
  std::function<bool(int32_t)> is_eog;        // nullptr: nothing ends generation but n_predict
  std::function<void(int32_t)> on_token;      // each generated token, end-of-generation excluded
  // Asked before each token is chosen; true ends the loop there (every token given to on_token has been evaluated,
  // so the session holds them all). nullptr: never.
  std::function<bool()> stop;
};

// params with every id of [0, n_vocab) that is_eog names banned: llama.cpp's --ignore-eos, for generate and for
// the server's slots alike.
sampling::SamplingParams with_eog_banned(sampling::SamplingParams params, uint32_t n_vocab,
                                         const std::function<bool(int32_t)>& is_eog);

// history holds the tokens the session has seen (for the repeat penalty); the prompt and the generated tokens are
// appended to it. With ignore_eos and is_eog, the ids of [0, n_vocab) that is_eog names are banned.
Result<GenerateStats> generate(Session& session, std::span<const int32_t> prompt, const GenerateOptions& options,
                               const GenerateHooks& hooks, std::vector<int32_t>& history);

// The process's peak resident set size in bytes (getrusage).
uint64_t peak_rss_bytes();

}  // namespace df::engine
