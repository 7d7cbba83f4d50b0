// One MoE layer's routed experts on the CPU, for every family's forward pass: the router's choice as llama.cpp's
// build_moe_ffn makes it with softmax gating, and the experts' outputs for every routed (token, slot), the experts
// made resident in the layer's record tier group by group as model::schedule_moe cuts them. What a family does
// with the outputs (weights, scales, the sum) stays in its forward.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "diskformer/backend/cpu/experts.h"
#include "diskformer/cache/tier.h"
#include "diskformer/model/moe_schedule.h"
#include "diskformer/model/records.h"
#include "diskformer/util/result.h"

namespace df::cpu {

struct Routing {
  std::vector<int32_t> sel;    // [n_tok][k] expert ids, most probable first
  std::vector<float> weight;   // [n_tok][k]
  std::vector<std::vector<std::pair<int64_t, int64_t>>> users;  // [n_expert]: the (token, slot) rows routed to it
};

// probs: [n_tok][n_expert] router logits, made probabilities in place (ggml's soft_max). Each token's k most
// probable experts (a stable descending sort: the lower id first on ties, as ggml's argsort), their probabilities
// renormalized over the k where `renormalize` (the sum in double, at least 2^-14, as llama.cpp clamps it). The
// tokens are routed over ctx's pool.
void route_top_k(Context& ctx, float* probs, int64_t n_tok, int64_t n_expert, int64_t k, bool renormalize,
                 Routing& out);

// The ids of the k largest of scores[0 .. n), largest first: the next layer's experts as guessed from its router.
void top_k_ids(const float* scores, int64_t n, int64_t k, std::vector<int32_t>& out);

struct RoutedLayer {
  cache::RecordTier* tier = nullptr;            // the layer's experts, record (layer, expert)
  const model::ExpertLayout* layout = nullptr;  // their record image
  uint32_t layer = 0;
  int64_t n_expert = 0, n_embd = 0;
  std::span<const int32_t> guess;               // the next layer's guessed experts: read ahead (may be empty)
  GateActivation act = GateActivation::kSwiGlu;
};

// Reused from layer to layer.
struct RoutedScratch {
  model::MoeSchedule schedule;
  WorkBuffer<float> gather, down;  // [routed rows][n_embd]: the experts' inputs and outputs, grouped by expert
  ExpertScratch experts;
};

// out[(t * k + slot) * n_embd ...] = the output of token t's expert in that slot for its row of in ([n_tok][n_embd]).
// Each expert runs once over its rows; reads ahead of the next layer start once the first group is pinned, so that
// they never take its slots. Errors: a failed read of a record.
Status routed_expert_rows(Context& ctx, const RoutedLayer& l, const Routing& r, int64_t n_tok, const float* in,
                          float* out, RoutedScratch& scratch);

}  // namespace df::cpu
