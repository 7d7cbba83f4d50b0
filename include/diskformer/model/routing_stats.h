// How a MoE model routes: per layer, how often each expert is chosen, and how many of a token's experts the
// previous token also used. Trained routers are uneven and sticky, synthetic ones flat; caches and prefetch live on
// that difference.
#pragma once

#include <cstdint>
#include <vector>

namespace df::model {

struct RoutingStats {
  uint32_t n_expert = 0, n_used = 0;
  std::vector<std::vector<uint64_t>> counts;  // [layer][expert]: times chosen
  std::vector<uint64_t> reused;               // [layer]: experts of a token also chosen by the token before it
  std::vector<uint64_t> transitions;          // [layer]: consecutive token pairs seen
  std::vector<std::vector<int32_t>> last;     // [layer]: the previous token's experts (empty before the first)

  RoutingStats(uint32_t n_layer, uint32_t n_expert, uint32_t n_used);
  // Tokens of one forward call, in order: sel is [n_tok][n_used] expert ids.
  void record(uint32_t layer, const int32_t* sel, int64_t n_tok);
  // The sequence ended: the next token has no predecessor.
  void break_sequence();

  uint64_t tokens(uint32_t layer) const;
  // Fraction of the layer's choices that went to expert e.
  double share(uint32_t layer, uint32_t e) const;
  // Fraction of a token's experts that the previous token also used (random routing gives n_used / n_expert).
  double reuse(uint32_t layer) const;
  // Entropy of the layer's expert shares divided by log(n_expert): 1 for perfectly even use.
  double evenness(uint32_t layer) const;
};

}  // namespace df::model
