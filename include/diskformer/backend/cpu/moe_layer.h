// The routed experts of one MoE layer on the CPU, as llama.cpp's build_moe_ffn computes them for the Mixtral layout
// and the qwen3moe families: the router's logits, a softmax over all experts, the top k by probability, their
// weights renormalized over the k (floored at 2^-14); each expert runs once over the tokens routed to it
// (routed_experts.h), its record pinned from a tier in the groups model::schedule_moe makes, and the outputs are
// weighted and added in routing order. The qwen3moe/Mixtral and qwen35moe forwards compute their experts with it;
// gemma4's, whose router input and expert outputs are scaled, uses routed_experts.h directly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "diskformer/backend/cpu/experts.h"
#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cpu/routed_experts.h"
#include "diskformer/cache/tier.h"
#include "diskformer/model/moe_schedule.h"
#include "diskformer/model/records.h"
#include "diskformer/model/routing_stats.h"
#include "diskformer/model/spec.h"
#include "diskformer/util/result.h"

namespace df::cpu {

struct MoeLayerArgs {
  const model::Mat* router = nullptr;            // [n_expert] x [n_embd]
  cache::RecordTier* tier = nullptr;             // records (layer, expert)
  const model::ExpertLayout* layout = nullptr;   // the records' image
  uint32_t layer = 0;
  const float* x = nullptr;                      // [n_tok][n_embd]: the FFN's normed input
  int64_t n_tok = 0;
  float* out = nullptr;                          // [n_tok][n_embd]
  bool one_row = false;                          // the router's product in llama.cpp's one-row orders
  std::span<const int32_t> guess;                // the next layer's expected experts, read ahead; may be empty
  model::RoutingStats* routing = nullptr;        // where the routes are recorded; nullptr: not recorded
};

// The experts a layer's router would pick for a token from its residual x [n_embd] (the layer's FFN norm, then its
// router: top k by logit) -- the next layer's, guessed during this one so that streamed records are read ahead.
void guess_experts(const Kernels& k, const model::ModelSpec& s, const model::Mat& ffn_norm, const model::Mat& router,
                   const float* x, std::vector<int32_t>& out);

class MoeLayer {
 public:
  explicit MoeLayer(const model::ModelSpec& spec) : s_(spec) {}
  // Errors: a failed read of an expert record.
  Status run(Context& ctx, const MoeLayerArgs& a);
  uint64_t expert_uses() const { return expert_uses_; }  // (token, expert) pairs routed so far

 private:
  const model::ModelSpec& s_;
  WorkBuffer<float> router_;      // [n_tok][n_expert]
  WorkBuffer<float> expert_out_;  // [n_tok][n_expert_used][n_embd]
  Routing route_;
  RoutedScratch scratch_;
  uint64_t expert_uses_ = 0;
};

}  // namespace df::cpu
