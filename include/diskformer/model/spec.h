// Architecture facts of a model, read from GGUF metadata (the llama.cpp key names, prefixed by the architecture).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/util/result.h"

namespace df::model {

enum class Family {
  kLlama,     // llama: dense SwiGLU, or the Mixtral layout (ffn_gate_inp + ffn_*_exps, softmax over the top-k)
  kQwen3,     // qwen3: llama + per-head RMSNorm of q and k before RoPE
  kQwen3Moe,  // qwen3moe: qwen3 attention + softmax over all experts, top-k, weights renormalized
  kGemma4,    // gemma4: sliding and full attention layers of their own shapes, GELU MLPs with post-norms, routed
              // experts beside the dense MLP (26B-A4B) or per-layer embeddings (E2B); model/gemma4.h
  kQwen35Moe, // qwen35moe: Gated DeltaNet layers with a gated attention layer every few, qwen3moe experts plus a
              // gated shared expert (model/qwen35.h)
};
const char* family_name(Family f);

// The Gated DeltaNet (linear attention) layers of a hybrid model: q, k and v heads of head_dim, a causal
// convolution over the last conv_kernel positions of their projections, and a head_dim x head_dim state per v head.
struct DeltaNetSpec {
  uint32_t conv_kernel = 0;  // ssm.conv_kernel
  uint32_t head_dim = 0;     // ssm.state_size (llama.cpp uses it for q, k and v heads alike)
  uint32_t n_k_heads = 0;    // ssm.group_count: q and k heads
  uint32_t n_v_heads = 0;    // ssm.time_step_rank: v heads, a multiple of n_k_heads (v head j reads q/k head
                             // j % n_k_heads)
  uint32_t k_dim() const { return n_k_heads * head_dim; }
  uint32_t v_dim() const { return n_v_heads * head_dim; }
  uint32_t conv_dim() const { return 2 * k_dim() + v_dim(); }  // channels of the convolution: q, k, v
};

// Which dimensions RoPE rotates together: adjacent pairs (2i, 2i+1), or i with i + n_rot/2 (GPT-NeoX).
enum class RopeStyle { kNormal, kNeox };

// One layer's attention and feed-forward shape. ModelSpec::layer() derives it from the scalars for the families
// whose layers are all alike; gemma4 lists every layer (its sliding and full layers differ).
struct LayerSpec {
  uint32_t n_head = 0, n_head_kv = 0;
  uint32_t head_dim_k = 0, head_dim_v = 0;
  uint32_t n_rot = 0;
  float rope_base = 10000.0f;
  uint32_t n_ff = 0;       // dense MLP width
  bool sliding = false;    // attends to the last ModelSpec::sliding_window positions only
  uint32_t kv_layer = 0;   // the layer whose KV cache it attends to: itself, or the earlier layer it shares

  uint32_t q_dim() const { return n_head * head_dim_k; }
  uint32_t kv_dim_k() const { return n_head_kv * head_dim_k; }
  uint32_t kv_dim_v() const { return n_head_kv * head_dim_v; }
};

struct ModelSpec {
  Family family = Family::kLlama;
  std::string arch;        // general.architecture
  uint32_t n_layer = 0;    // block_count
  uint32_t n_embd = 0;     // embedding_length
  uint32_t n_vocab = 0;    // rows of token_embd
  uint32_t n_ctx_train = 0;
  uint32_t n_head = 0, n_head_kv = 0;
  uint32_t head_dim_k = 0, head_dim_v = 0;  // attention.key_length / value_length (default n_embd / n_head)
  uint32_t n_ff = 0;          // feed_forward_length (dense layers)
  uint32_t n_expert = 0;      // expert_count; 0 = dense
  uint32_t n_expert_used = 0; // expert_used_count
  uint32_t n_ff_expert = 0;   // expert_feed_forward_length, else feed_forward_length
  bool norm_topk = true;      // renormalize the selected experts' weights to sum to 1
  float norm_eps = 1e-5f;     // attention.layer_norm_rms_epsilon
  float rope_base = 10000.0f; // rope.freq_base
  uint32_t n_rot = 0;         // rope.dimension_count (default head_dim_k)
  RopeStyle rope_style = RopeStyle::kNormal;
  bool qk_norm = false;       // attn_q_norm / attn_k_norm per head
  // Hybrid models (qwen35moe): which layers are Gated DeltaNet instead of attention ([n_layer]; empty: none), their
  // sizes, the attention layers' output gate (attn_q holds each head's query and then its gate), the shared expert.
  std::vector<bool> recurrent;
  DeltaNetSpec delta_net;
  bool attn_gate = false;
  uint32_t n_ff_shared = 0;   // expert_shared_feed_forward_length; 0: no shared expert
  uint32_t n_layer_nextn = 0; // nextn_predict_layers: MTP blocks after the n_layer main ones (not run)

  // Where layers differ (gemma4): [n_layer], and the scalars above are the largest of each (head_dim_k/v, n_rot and
  // rope_base those of the full-attention layers). Empty for the other families.
  std::vector<LayerSpec> layers;
  uint32_t sliding_window = 0;       // attention.sliding_window: the positions a sliding layer sees, itself included
  uint32_t n_embd_per_layer = 0;     // embedding_length_per_layer_input: per-layer embedding width (0: none)
  float final_logit_softcap = 0.0f;  // logits = c * tanh(logits / c) where nonzero (final_logit_softcapping)

  bool moe() const { return n_expert > 0; }
  LayerSpec layer(uint32_t il) const;
  bool is_recurrent(uint32_t il) const { return il < recurrent.size() && recurrent[il]; }
  uint32_t n_recurrent() const { return uint32_t(std::count(recurrent.begin(), recurrent.end(), true)); }
  uint32_t n_kv_layers() const { return n_layer - n_recurrent(); }  // layers with a KV cache
  uint32_t q_dim() const { return n_head * head_dim_k; }
  uint32_t kv_dim_k() const { return n_head_kv * head_dim_k; }
  uint32_t kv_dim_v() const { return n_head_kv * head_dim_v; }
};

// Errors name the file and the key: an unsupported architecture, a missing or inconsistent hyperparameter.
Result<ModelSpec> spec_from_gguf(const gguf::File& f);

}  // namespace df::model
