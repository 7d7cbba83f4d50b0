// gemma4's forward pass on the CPU, as llama.cpp's graph for it (its src/models/gemma4.cpp) computes it, rounding as
// its CPU backend does. Per layer:
//
//   h = norm(x) attn_norm; q = norm_h(wq h) q_norm, RoPE; own KV: k = norm_h(wk h) k_norm, RoPE;
//       v = norm_h(wv h or wk h) (no weight); attention with scale 1 (sliding layers: the last window positions)
//   a = norm(wo o) attn_post_norm + x
//   dense layer:  f = mlp(norm(a) ffn_norm)                       mlp(u) = down(gelu(gate u) * up u)
//   MoE layer:    f = norm(mlp(norm(a) ffn_norm)) post_ffw_norm_1
//                     + norm(sum_j w_j s_j expert_j(norm(a) pre_ffw_norm_2)) post_ffw_norm_2,
//                 routed by softmax(router(norm(a) / sqrt(d) router_scale)), the top k renormalized
//   x = norm(f) post_ffw_norm + a
//   PLE:          x += norm(proj(gelu(inp_gate x) * pl[layer])) post_norm
//   x *= layer_output_scale
//
// with x0 = token_embd[tok] sqrt(d), pl = (norm_P(ple_model_proj x0 / sqrt(d)) ple_proj_norm + ple_table[tok]
// sqrt(P)) / sqrt(2) per layer, and logits = c tanh(head(norm(x) output_norm) / c). Every layer computes every row
// of the batch (llama.cpp's gemma4 graph selects the output rows only after the final norm). Resident tensors are
// views into RAM the caller owns; dense layers, routed experts and the PLE table's rows may come from record tiers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "diskformer/backend/cpu/forward.h"

namespace df::cpu {

class Gemma4Forward final : public ForwardPass {
 public:
  // spec (family gemma4) and weights must outlive the forward.
  Gemma4Forward(const model::ModelSpec& spec, const ForwardWeights& weights, Context& ctx)
      : s_(spec), w_(weights), ctx_(ctx) {}

  Status run(std::span<const int32_t> tokens, KvCache& kv, bool all_logits) override;
  const std::vector<float>& logits() const override { return b_.logits; }
  const ForwardStats& stats() const override { return stats_; }
  void set_routing_stats(model::RoutingStats* r) override { routing_ = r; }

 private:
  // Activations of one batch; sized on first use and reused.
  struct Buffers {
    std::vector<float> x;         // [n_tok][n_embd] residual stream
    std::vector<float> xn;        // [n_tok][n_embd] normed input of a sublayer
    std::vector<float> attn_out;  // [n_tok][n_embd] the residual after attention
    std::vector<float> q, k, v;   // [n_tok][q_dim | kv_dim] of the layer
    std::vector<float> attn;      // [n_tok][q_dim] attention output
    std::vector<float> proj;      // [n_tok][n_embd] sublayer output
    std::vector<float> mlp;       // [n_tok][n_embd] the dense MLP's output in a MoE layer
    std::vector<float> gate, up;  // [n_tok][n_ff]
    std::vector<float> router;    // [n_tok][n_embd] the router's input
    std::vector<float> probs;     // [n_tok][n_expert] the router's probabilities
    std::vector<float> expert_out;  // [n_tok][n_expert_used][n_embd]
    std::vector<float> ple;       // [n_tok][n_layer][P] per-layer inputs
    std::vector<float> ple_rows;  // [n_tok][n_layer * P] the table's rows, then scaled
    std::vector<float> ple_gate;  // [n_tok][P]
    std::vector<float> logits;    // [n_out][n_vocab]
    RoutedScratch routed;
  };

  Status per_layer_inputs(std::span<const int32_t> tokens);
  void attention(const model::LayerWeights& lw, uint32_t il, int64_t n, KvCache& kv);
  // out = down(gelu(gate in) * up in), n rows.
  void mlp(const model::LayerWeights& lw, uint32_t il, int64_t n, const float* in, float* out);
  // proj = the routed experts' weighted sum for the rows of attn_out.
  Status routed_experts(const model::LayerWeights& lw, uint32_t il, int64_t n);
  // The router's input for rows of attn_out: norm(a) / sqrt(d) * router_scale, into `out`.
  void router_input(const model::LayerWeights& lw, const float* a, int64_t n, float* out);
  // The next layer's experts as its router would pick them from the current residual (decode, streamed experts).
  void guess_experts(uint32_t next);
  void ple_block(const model::LayerWeights& lw, uint32_t il, int64_t n);
  void matmul(const model::Mat& w, const float* x, int64_t n, float* y);

  const model::ModelSpec& s_;
  const ForwardWeights& w_;
  Context& ctx_;
  Buffers b_;
  ForwardStats stats_;
  model::RoutingStats* routing_ = nullptr;
  cache::Pins layer_pin_;       // the streamed dense layer being computed
  std::vector<int32_t> guess_;  // the next layer's guessed experts (empty: none)
  Routing route_;               // the current MoE layer's choice
};

}  // namespace df::cpu
