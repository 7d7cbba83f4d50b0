#include "diskformer/model/spec.h"

#include "diskformer/model/gemma4.h"
#include "diskformer/model/qwen35.h"

namespace df::model {

const char* family_name(Family f) {
  switch (f) {
    case Family::kLlama: return "llama";
    case Family::kQwen3: return "qwen3";
    case Family::kQwen3Moe: return "qwen3moe";
    case Family::kGemma4: return "gemma4";
    case Family::kQwen35Moe: return "qwen35moe";
  }
  return "?";
}

namespace {

Result<uint32_t> get_u32(const gguf::File& f, const std::string& key) {
  DF_ASSIGN(uint64_t v, f.get_u64(key));
  if (v == 0 || v > (1u << 30))
    return Error{f.path + ": metadata " + key + " = " + std::to_string(v) + " is out of range"};
  return static_cast<uint32_t>(v);
}

}  // namespace

LayerSpec ModelSpec::layer(uint32_t il) const {
  if (!layers.empty()) return layers[il];
  return {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim_k = head_dim_k, .head_dim_v = head_dim_v,
          .n_rot = n_rot, .rope_base = rope_base, .n_ff = n_ff, .sliding = false, .kv_layer = il};
}

Result<ModelSpec> spec_from_gguf(const gguf::File& f) {
  ModelSpec s;
  s.arch = f.architecture();
  if (s.arch == "llama") {
    s.family = Family::kLlama;
  } else if (s.arch == "qwen3") {
    s.family = Family::kQwen3;
  } else if (s.arch == "qwen3moe") {
    s.family = Family::kQwen3Moe;
  } else if (s.arch == "gemma4") {
    return gemma4_spec_from_gguf(f);
  } else if (s.arch == "qwen35moe") {
    s.family = Family::kQwen35Moe;
  } else {
    return Error{f.path + ": unsupported architecture '" + s.arch +
                 "' (general.architecture; supported: llama, qwen3, qwen3moe, qwen35moe, gemma4)"};
  }
  const std::string p = s.arch + ".";
  DF_ASSIGN(s.n_layer, get_u32(f, p + "block_count"));
  DF_ASSIGN(s.n_embd, get_u32(f, p + "embedding_length"));
  DF_ASSIGN(s.n_head, get_u32(f, p + "attention.head_count"));
  s.n_head_kv = static_cast<uint32_t>(f.get_u64_or(p + "attention.head_count_kv", s.n_head));
  s.n_ctx_train = static_cast<uint32_t>(f.get_u64_or(p + "context_length", 4096));
  if (s.n_head_kv == 0 || s.n_head % s.n_head_kv != 0)
    return Error{f.path + ": metadata " + p + "attention.head_count_kv = " + std::to_string(s.n_head_kv) +
                 " does not divide head_count " + std::to_string(s.n_head)};
  s.head_dim_k = static_cast<uint32_t>(f.get_u64_or(p + "attention.key_length", s.n_embd / s.n_head));
  s.head_dim_v = static_cast<uint32_t>(f.get_u64_or(p + "attention.value_length", s.n_embd / s.n_head));
  if (s.head_dim_k == 0 || s.head_dim_k % 2 != 0 || s.head_dim_v == 0)
    return Error{f.path + ": metadata " + p + "attention.key_length = " + std::to_string(s.head_dim_k) +
                 " must be even and non-zero"};
  s.n_ff = static_cast<uint32_t>(f.get_u64_or(p + "feed_forward_length", 0));
  s.n_expert = static_cast<uint32_t>(f.get_u64_or(p + "expert_count", 0));
  if (s.moe()) {
    DF_ASSIGN(s.n_expert_used, get_u32(f, p + "expert_used_count"));
    if (s.n_expert_used > s.n_expert)
      return Error{f.path + ": metadata " + p + "expert_used_count = " + std::to_string(s.n_expert_used) +
                   " exceeds expert_count " + std::to_string(s.n_expert)};
    s.n_ff_expert = static_cast<uint32_t>(f.get_u64_or(p + "expert_feed_forward_length", s.n_ff));
    if (s.n_ff_expert == 0)
      return Error{f.path + ": metadata " + p + "expert_feed_forward_length is missing"};
  } else if (s.family == Family::kQwen3Moe || s.family == Family::kQwen35Moe) {
    return Error{f.path + ": metadata " + p + "expert_count is missing (" + s.arch + " needs experts)"};
  } else if (s.n_ff == 0) {
    return Error{f.path + ": metadata " + p + "feed_forward_length is missing"};
  }
  s.norm_eps = static_cast<float>(f.get_f64_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  s.rope_base = static_cast<float>(f.get_f64_or(p + "rope.freq_base", 10000.0));
  s.n_rot = static_cast<uint32_t>(f.get_u64_or(p + "rope.dimension_count", s.head_dim_k));
  if (s.n_rot == 0 || s.n_rot > s.head_dim_k || s.n_rot % 2 != 0)
    return Error{f.path + ": metadata " + p + "rope.dimension_count = " + std::to_string(s.n_rot) +
                 " must be even and at most the head size " + std::to_string(s.head_dim_k)};
  s.rope_style = s.family == Family::kLlama ? RopeStyle::kNormal : RopeStyle::kNeox;
  s.qk_norm = s.family != Family::kLlama;
  s.norm_topk = true;
  const gguf::TensorInfo* embd = f.tensor("token_embd.weight");
  if (!embd || embd->shape.size() < 2)
    return Error{f.path + ": tensor token_embd.weight is missing or not 2-D"};
  s.n_vocab = static_cast<uint32_t>(embd->shape[1]);
  if (s.family == Family::kQwen35Moe) DF_TRY(read_qwen35moe_spec(f, s));
  return s;
}

}  // namespace df::model
