// One forward pass over a batch of tokens on the CPU for the llama, qwen3 and qwen3moe families (spec flags select
// qk-norm, RoPE pairing and the feed-forward kind), as llama.cpp's graphs for them compute it. Resident tensors are
// views into RAM the caller owns; what streams comes from record tiers: dense layers one at a time (a dense model
// larger than the RAM budget), and the routed experts of MoE layers (all of them resident in a tier that never
// evicts, or a cache under the budget), scheduled by model::schedule_moe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "diskformer/backend/cpu/experts.h"
#include "diskformer/backend/cpu/kv_cache.h"
#include "diskformer/backend/cpu/ops.h"
#include "diskformer/cache/tier.h"
#include "diskformer/model/moe_schedule.h"
#include "diskformer/model/records.h"
#include "diskformer/model/routing_stats.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/util/result.h"

namespace df::cpu {

struct ForwardWeights {
  model::Mat token_embd, output_norm, output;  // [n_vocab] x [n_embd], [n_embd] f32, [n_vocab] x [n_embd]
  std::vector<model::LayerWeights> layers;     // resident dense tensors per layer; empty when they stream
  cache::RecordTier* layer_tier = nullptr;     // dense layers, record (layer, 0), when `layers` is empty
  cache::RecordTier* expert_tier = nullptr;    // MoE models: routed experts, record (layer, expert)
  const model::RecordLayouts* layouts = nullptr;  // the tiers' record images
};

// Activations of one batch; sized on first use and reused.
struct ForwardBuffers {
  std::vector<float> x;       // [n_tok][n_embd] residual stream
  std::vector<float> xn;      // [n_tok][n_embd] normed input of a sublayer
  std::vector<float> q;       // [n_tok][n_head * head_dim_k]
  std::vector<float> k, v;    // [n_tok][n_head_kv * head_dim]
  std::vector<float> attn;    // [n_tok][n_head * head_dim_v]
  std::vector<float> proj;    // [n_tok][n_embd] sublayer output
  std::vector<float> gate, up;  // [n_tok][n_ff] (dense layers)
  std::vector<float> router;  // [n_tok][n_expert]
  std::vector<float> expert_out;  // [n_tok][n_expert_used][n_embd]
  std::vector<float> gather;  // [routed (token, expert) pairs][n_embd] inputs, grouped by expert
  std::vector<float> down;    // [routed pairs][n_embd] expert outputs, grouped by expert
  std::vector<float> logits;  // [n_out][n_vocab]
  ExpertScratch experts;
};

// Routing counters for the cache statistics and the benchmarks.
struct ForwardStats {
  uint64_t tokens = 0;
  uint64_t expert_uses = 0;  // (token, expert) pairs routed
};

class Forward {
 public:
  // llama.cpp's CPU attention takes a tiled kernel for batches of 64 or more queries, whose arithmetic is not
  // reproduced here; such batches use the orders of its one-token-at-a-time prefill throughout instead, which equal
  // its batched results wherever the two agree (the gold files' stable cases). So a batch of one token and a batch
  // of this many or more compute each position in the same one-row orders (engine/prefix_reuse.h relies on it).
  static constexpr int64_t kTiledAttentionRows = 64;

  // spec and weights must outlive the forward.
  Forward(const model::ModelSpec& spec, const ForwardWeights& weights, Context& ctx)
      : s_(spec), w_(weights), ctx_(ctx) {}

  // Runs tokens at positions kv.n_past .. kv.n_past + n - 1, appends their keys and values, and leaves the logits of
  // the last token (all_logits: of every token, [n][n_vocab]) in logits(). Errors: context overflow, a token id out
  // of the vocabulary, a failed read of a streamed record.
  Status run(std::span<const int32_t> tokens, KvCache& kv, bool all_logits = false);
  // One decode step of several sequences (forward_many.cpp): tokens[i] at position kvs[i]->n_past of its own cache,
  // the logits of every row in logits() ([n][n_vocab]). Every product takes its one-row order, so row i equals what
  // run() computes for tokens[i] on kvs[i] alone, while each routed expert is loaded and multiplied once for all the
  // rows routed to it. The caches must be distinct. Errors as run()'s; no cache advances on an error.
  Status run_many(std::span<const int32_t> tokens, std::span<KvCache* const> kvs);
  const std::vector<float>& logits() const { return b_.logits; }
  const ForwardStats& stats() const { return stats_; }
  // Where the routers send tokens, recorded while set (nullptr: not recorded). Not owned.
  void set_routing_stats(model::RoutingStats* r) { routing_ = r; }

 private:
  Status attention_block(const model::LayerWeights& lw, uint32_t il, int64_t n, KvCache& kv);
  // Row t of the batch attends over kvs[t] alone (run_many).
  void attention_many(const model::LayerWeights& lw, uint32_t il, std::span<KvCache* const> kvs);
  void dense_ffn(const model::LayerWeights& lw, int64_t n);
  Status moe_ffn(const model::LayerWeights& lw, uint32_t il, int64_t n);
  // The next layer's experts as its router would pick them from the current residual (decode, streamed experts).
  void guess_experts(uint32_t next);
  // The same for the n rows of a decode step of several sequences: the union of their guesses.
  void guess_experts_many(uint32_t next, int64_t n);
  // A product of the batch in llama.cpp's order for it (one_row_: in its one-row orders).
  void matmul(const model::Mat& w, const float* x, int64_t n, float* y);

  const model::ModelSpec& s_;
  const ForwardWeights& w_;
  Context& ctx_;
  ForwardBuffers b_;
  ForwardStats stats_;
  model::RoutingStats* routing_ = nullptr;
  cache::Pins layer_pin_;  // the streamed dense layer being computed
  std::vector<int32_t> guess_;  // the next layer's guessed experts (empty: none)
  model::MoeSchedule schedule_;
  bool one_row_ = false;
};

}  // namespace df::cpu
