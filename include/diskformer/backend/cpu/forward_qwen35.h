// One forward pass of a qwen35moe model (Qwen3.5 / Qwen3.6 MoE) over a batch of tokens on the CPU, as llama.cpp's
// qwen35moe graph computes it:
//
//   x = token_embd[token]
//   per layer:  h = rmsnorm(x) * attn_norm
//               x += DeltaNet(h) in recurrent layers, gated attention(h) in the others
//               u = rmsnorm(x) * post_attention_norm
//               x += routed experts(u) + shared expert(u) * sigmoid(ffn_gate_inp_shexp . u)
//   logits = output @ (rmsnorm(x) * output_norm)
//
// DeltaNet(h): the q, k, v channels attn_qkv @ h through a causal convolution (its window carried in the recurrent
// state) and SiLU; q and k L2-normalized per head; beta = sigmoid(ssm_beta @ h), g = softplus(ssm_alpha @ h +
// ssm_dt.bias) * ssm_a per v head; the gated delta rule (cpu::gated_delta_rule) with each head's state; then
// rmsnorm(head) * ssm_norm * silu(attn_gate @ h), and ssm_out @ that.
// Gated attention(h): attn_q @ h gives each head's query and its gate; q and k RMSNorm per head, NeoX RoPE on the
// first n_rot dims, causal attention over the f16 KV cache (cpu::attention), times sigmoid(gate), attn_output @ that.
//
// A batch runs each projection over all its tokens at once and the delta rule token after token, so batched and
// single-token prefill leave the same state. Routed experts come from a record tier (cpu::MoeLayer); everything else
// is resident. As cpu::Forward does, batches of 64 tokens or more take llama.cpp's one-token orders throughout.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "diskformer/backend/cpu/forward.h"
#include "diskformer/backend/cpu/kv_cache.h"
#include "diskformer/backend/cpu/moe_layer.h"
#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cpu/recurrent_state.h"
#include "diskformer/model/routing_stats.h"
#include "diskformer/model/spec.h"
#include "diskformer/util/result.h"

namespace df::cpu {

// Activations of one batch; sized on first use and reused.
struct HybridBuffers {
  std::vector<float> x;       // [n_tok][n_embd] residual stream
  std::vector<float> xn;      // [n_tok][n_embd] normed input of a sublayer
  std::vector<float> proj;    // [n_tok][n_embd] sublayer output
  // DeltaNet layers
  std::vector<float> mixed;   // [n_tok][conv_dim] attn_qkv @ h
  std::vector<float> conv;    // [n_tok][conv_dim] after the convolution and SiLU; q, k then L2-normalized
  std::vector<float> z;       // [n_tok][v_dim] the output gate's logits, then silu(z)
  std::vector<float> beta;    // [n_tok][n_v_heads]
  std::vector<float> g;       // [n_tok][n_v_heads] log decay
  std::vector<float> core;    // [n_tok][v_dim] the delta rule's output, then gated and normed
  // attention layers
  std::vector<float> q_gate;  // [n_tok][n_head][2][head_dim] attn_q @ h
  std::vector<float> q, gate; // [n_tok][n_head * head_dim]
  std::vector<float> k, v;    // [n_tok][n_head_kv * head_dim]
  std::vector<float> attn;    // [n_tok][n_head * head_dim]
  // shared expert
  std::vector<float> sh_gate, sh_up;  // [n_tok][n_ff_shared]
  std::vector<float> sh_logit;        // [n_tok]
  std::vector<float> sh_out;          // [n_tok][n_embd]
  std::vector<float> logits;          // [n_out][n_vocab]
};

class HybridForward {
 public:
  // spec and weights must outlive the forward; weights.layers must be resident (the layers do not stream).
  HybridForward(const model::ModelSpec& spec, const ForwardWeights& weights, Context& ctx);

  // Runs tokens at positions kv.n_past .. kv.n_past + n - 1: appends their keys and values to the attention layers'
  // cache (the DeltaNet layers have none there) and advances the DeltaNet layers' state (which must be at the same
  // position). Leaves the last token's logits (all_logits: every token's, [n][n_vocab]) in logits(). Errors (before
  // anything changes): context overflow, a token id out of the vocabulary; a failed read of a streamed expert
  // (the caches are then partly advanced: the caller rolls back).
  // With save set, the recurrent state after the first save_after tokens (0 < save_after < n) is also left there.
  struct Options {
    bool all_logits = false;
    RecurrentState* save = nullptr;
    int64_t save_after = 0;
  };
  Status run(std::span<const int32_t> tokens, KvCache& kv, RecurrentState& state, const Options& o);
  Status run(std::span<const int32_t> tokens, KvCache& kv, RecurrentState& state) { return run(tokens, kv, state, {}); }
  const std::vector<float>& logits() const { return b_.logits; }
  const ForwardStats& stats() const { return stats_; }
  void set_routing_stats(model::RoutingStats* r) { routing_ = r; }

 private:
  void delta_net(const model::LayerWeights& lw, uint32_t slot, int64_t n, RecurrentState& state, const Options& o);
  void attention_block(const model::LayerWeights& lw, uint32_t il, int64_t n, KvCache& kv);
  Status ffn(const model::LayerWeights& lw, uint32_t il, int64_t n);
  void guess_experts(uint32_t next);
  void matmul(const model::Mat& w, const float* x, int64_t n, float* y);

  const model::ModelSpec& s_;
  const ForwardWeights& w_;
  Context& ctx_;
  HybridBuffers b_;
  MoeLayer moe_;
  ForwardStats stats_;
  model::RoutingStats* routing_ = nullptr;
  std::vector<uint32_t> slot_;   // [n_layer]: a recurrent layer's index among the recurrent layers
  std::vector<int32_t> guess_;   // the next layer's guessed experts (empty: none)
};

}  // namespace df::cpu
