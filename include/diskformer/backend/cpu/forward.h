// One forward pass over a batch of tokens on the CPU for the llama, qwen3 and qwen3moe families (spec flags select
// qk-norm, RoPE pairing and the feed-forward kind), as llama.cpp's graphs for them compute it. Resident tensors are
// views into RAM the caller owns; what streams comes from record tiers: dense layers one at a time (a dense model
// larger than the RAM budget), and the routed experts of MoE layers (all of them resident in a tier that never
// evicts, or a cache under the budget), scheduled by model::schedule_moe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "diskformer/backend/cpu/experts.h"
#include "diskformer/backend/cpu/kv_cache.h"
#include "diskformer/backend/cpu/moe_layer.h"
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
  cache::RecordTier* token_rows = nullptr;     // token_embd's rows where they stream (then it has no data)
  std::vector<model::LayerWeights> layers;     // resident dense tensors per layer; empty when they stream
  cache::RecordTier* layer_tier = nullptr;     // dense layers, record (layer, 0), when `layers` is empty
  cache::RecordTier* expert_tier = nullptr;    // MoE models: routed experts, record (layer, expert)
  const model::RecordLayouts* layouts = nullptr;  // the tiers' record images
  // gemma4 (forward_gemma4.h)
  model::Mat rope_freqs;                       // [head_dim_k / 2] f32
  model::Mat ple_model_proj, ple_proj_norm;    // [n_layer * P] x [n_embd], [P] f32 (P = n_embd_per_layer)
  model::Mat ple_table;                        // [n_vocab] x [n_layer * P], where resident
  cache::RecordTier* ple_rows = nullptr;       // else its rows, record (0, token id), through a row tier
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
  std::vector<float> logits;  // [n_out][n_vocab]
};

// Routing counters for the cache statistics and the benchmarks.
struct ForwardStats {
  uint64_t tokens = 0;
  uint64_t expert_uses = 0;  // (token, expert) pairs routed
};

// What every forward checks before anything changes: a batch of at least one token that fits the context after
// kv.n_past, its ids inside the vocabulary.
Status check_batch(const model::ModelSpec& s, std::span<const int32_t> tokens, const KvCache& kv);

// Layer il's dense tensors: the resident views, or the streamed layer pinned into `pin` (its views in `streamed`)
// while the next layer (the first again after the last: the next token starts there) is read ahead.
Result<const model::LayerWeights*> dense_layer(const ForwardWeights& w, uint32_t il, uint32_t n_layer,
                                               cache::Pins& pin, model::LayerWeights& streamed);

// Layer il's attention over one sequence's cache for n new positions from kv.n_past: q [n][q_dim] and k
// [n][kv_dim_k] (normed already where the family norms them) take RoPE, k and v [n][kv_dim_v] go into the cache as
// halves, and the n queries attend over it into attn [n][n_head * head_dim_v]. The llama/qwen3 families, qwen35moe's
// gated layers and each sequence of a batched decode step (n = 1) share it.
void rope_cache_attend(Context& ctx, const model::ModelSpec& s, KvCache& kv, uint32_t il, int64_t n, float* q,
                       float* k, const float* v, float* attn);

// A family's forward pass, as the engine drives it: Forward (llama, qwen3, qwen3moe) or Gemma4Forward.
class ForwardPass {
 public:
  virtual ~ForwardPass() = default;
  // Runs tokens at positions kv.n_past .. kv.n_past + n - 1, appends their keys and values, and leaves the logits of
  // the last token (all_logits: of every token, [n][n_vocab]) in logits(). Errors: context overflow, a token id out
  // of the vocabulary, a failed read of a streamed record.
  virtual Status run(std::span<const int32_t> tokens, KvCache& kv, bool all_logits) = 0;
  virtual const std::vector<float>& logits() const = 0;
  virtual const ForwardStats& stats() const = 0;
  // Where the routers send tokens, recorded while set (nullptr: not recorded). Not owned.
  virtual void set_routing_stats(model::RoutingStats* r) = 0;
};

// The forward pass of the spec's family; spec and weights must outlive it.
std::unique_ptr<ForwardPass> make_forward(const model::ModelSpec& spec, const ForwardWeights& weights, Context& ctx);

class Forward final : public ForwardPass {
 public:
  // spec and weights must outlive the forward.
  Forward(const model::ModelSpec& spec, const ForwardWeights& weights, Context& ctx)
      : s_(spec), w_(weights), ctx_(ctx), moe_(spec) {}

  Status run(std::span<const int32_t> tokens, KvCache& kv, bool all_logits = false) override;
  // One decode step of several sequences (forward_many.cpp): tokens[i] at position kvs[i]->n_past of its own cache,
  // the logits of every row in logits() ([n][n_vocab]). Every product takes its one-row order, so row i equals what
  // run() computes for tokens[i] on kvs[i] alone, while each routed expert is loaded and multiplied once for all the
  // rows routed to it. The caches must be distinct. Errors as run()'s; no cache advances on an error.
  Status run_many(std::span<const int32_t> tokens, std::span<KvCache* const> kvs);
  const std::vector<float>& logits() const override { return b_.logits; }
  const ForwardStats& stats() const override { return stats_; }
  void set_routing_stats(model::RoutingStats* r) override { routing_ = r; }

 private:
  Status attention_block(const model::LayerWeights& lw, uint32_t il, int64_t n, KvCache& kv);
  // qwen3's per-head RMS norms of one position's q and k rows (nothing for the families without them).
  void qk_norm(const model::LayerWeights& lw, float* q, float* k) const;
  // Row t of the batch attends over kvs[t] alone (run_many).
  void attention_many(const model::LayerWeights& lw, uint32_t il, std::span<KvCache* const> kvs);
  void dense_ffn(const model::LayerWeights& lw, int64_t n);
  Status moe_ffn(const model::LayerWeights& lw, uint32_t il, int64_t n);
  // The next layer's experts as its router would pick them from the current residual (decode, streamed experts).
  void guess_experts(uint32_t next);
  // The same for the n rows of a decode step of several sequences: the union of their guesses.
  void guess_experts_many(uint32_t next, int64_t n);
  // A product of the batch in llama.cpp's order for it (one_row_, a decode step of several sequences: each row in
  // the one-row orders, as it would step alone).
  void matmul(const model::Mat& w, const float* x, int64_t n, float* y);

  const model::ModelSpec& s_;
  const ForwardWeights& w_;
  Context& ctx_;
  ForwardBuffers b_;
  ForwardStats stats_;
  model::RoutingStats* routing_ = nullptr;
  cache::Pins layer_pin_;  // the streamed dense layer being computed
  std::vector<int32_t> guess_;  // the next layer's guessed experts (empty: none)
  MoeLayer moe_;  // MoE layers' routing and experts
  bool one_row_ = false;
};

}  // namespace df::cpu
