// Architecture facts of a model, read from GGUF metadata (the llama.cpp key names, prefixed by the architecture).
#pragma once

#include <cstdint>
#include <string>

#include "diskformer/gguf/reader.h"
#include "diskformer/util/result.h"

namespace df::model {

enum class Family {
  kLlama,     // llama: dense SwiGLU, or the Mixtral layout (ffn_gate_inp + ffn_*_exps, softmax over the top-k)
  kQwen3,     // qwen3: llama + per-head RMSNorm of q and k before RoPE
  kQwen3Moe,  // qwen3moe: qwen3 attention + softmax over all experts, top-k, weights renormalized
};
const char* family_name(Family f);

// Which dimensions RoPE rotates together: adjacent pairs (2i, 2i+1), or i with i + n_rot/2 (GPT-NeoX).
enum class RopeStyle { kNormal, kNeox };

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

  bool moe() const { return n_expert > 0; }
  uint32_t q_dim() const { return n_head * head_dim_k; }
  uint32_t kv_dim_k() const { return n_head_kv * head_dim_k; }
  uint32_t kv_dim_v() const { return n_head_kv * head_dim_v; }
};

// Errors name the file and the key: an unsupported architecture, a missing or inconsistent hyperparameter.
Result<ModelSpec> spec_from_gguf(const gguf::File& f);

}  // namespace df::model
