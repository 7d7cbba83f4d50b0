// Architecture facts of a model, read from GGUF metadata (the llama.cpp key names, prefixed by the architecture).
#pragma once

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
};
const char* family_name(Family f);

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

  // Where layers differ (gemma4): [n_layer], and the scalars above are the largest of each (head_dim_k/v, n_rot and
  // rope_base those of the full-attention layers). Empty for the other families.
  std::vector<LayerSpec> layers;
  uint32_t sliding_window = 0;       // attention.sliding_window: the positions a sliding layer sees, itself included
  uint32_t n_embd_per_layer = 0;     // embedding_length_per_layer_input: per-layer embedding width (0: none)
  float final_logit_softcap = 0.0f;  // logits = c * tanh(logits / c) where nonzero (final_logit_softcapping)

  bool moe() const { return n_expert > 0; }
  LayerSpec layer(uint32_t il) const;
  uint32_t q_dim() const { return n_head * head_dim_k; }
  uint32_t kv_dim_k() const { return n_head_kv * head_dim_k; }
  uint32_t kv_dim_v() const { return n_head_kv * head_dim_v; }
};

// Errors name the file and the key: an unsupported architecture, a missing or inconsistent hyperparameter.
Result<ModelSpec> spec_from_gguf(const gguf::File& f);

}  // namespace df::model
