#include "diskformer/model/gemma4.h"

#include <algorithm>

namespace df::model {

namespace {

const std::string kPrefix = "gemma4.";

std::string key_error(const gguf::File& f, const std::string& key, const std::string& what) {
  const auto it = std::find_if(f.metadata.begin(), f.metadata.end(), [&](const auto& kv) { return kv.key == key; });
  const std::string at = it == f.metadata.end() ? "" : " (at offset " + std::to_string(it->offset) + ")";
  return f.path + ": metadata " + key + at + " " + what;
}

Result<uint32_t> required_u32(const gguf::File& f, const std::string& key, bool zero_ok = false) {
  DF_ASSIGN(uint64_t v, f.get_u64(key));
  if ((v == 0 && !zero_ok) || v > (1u << 30))
    return Error{key_error(f, key, "= " + std::to_string(v) + " is out of range")};
  return static_cast<uint32_t>(v);
}

// An unsigned count, or a bool as 0/1 (sliding_window_pattern is a bool array).
std::optional<uint64_t> count_of(const gguf::Value& x) {
  if (std::optional<uint64_t> u = x.to_u64()) return u;
  if (std::optional<bool> b = x.to_bool()) return uint64_t{*b};
  return std::nullopt;
}

// A per-layer value written as one number for every layer or as an array of n_layer numbers (llama.cpp's
// get_key_or_arr); `fallback` where the key is absent and not required.
Result<std::vector<uint32_t>> per_layer(const gguf::File& f, const std::string& key, uint32_t n_layer, bool required,
                                        uint32_t fallback) {
  const gguf::Value* v = f.find(key);
  if (!v) {
    if (required) return Error{f.path + ": metadata " + key + " is missing"};
    return std::vector<uint32_t>(n_layer, fallback);
  }
  std::vector<uint32_t> out;
  if (const gguf::Array* a = v->array()) {
    if (a->items.size() != n_layer)
      return Error{key_error(f, key, "has " + std::to_string(a->items.size()) + " entries, the model " +
                                         std::to_string(n_layer) + " layers")};
    for (const gguf::Value& x : a->items) {
      const std::optional<uint64_t> u = count_of(x);
      if (!u || *u > (1u << 30)) return Error{key_error(f, key, "holds " + x.summary() + ", not a layer's count")};
      out.push_back(static_cast<uint32_t>(*u));
    }
    return out;
  }
  const std::optional<uint64_t> u = count_of(*v);
  if (!u || *u > (1u << 30)) return Error{key_error(f, key, "= " + v->summary() + " is not a count")};
  return std::vector<uint32_t>(n_layer, static_cast<uint32_t>(*u));
}

std::string layer_text(uint32_t il) { return "layer " + std::to_string(il); }

}  // namespace

uint32_t gemma4_kv_source(uint32_t kv0, bool sliding) { return kv0 - (sliding ? 2 : 1); }

Result<ModelSpec> gemma4_spec_from_gguf(const gguf::File& f) {
  const std::string& p = kPrefix;
  ModelSpec s;
  s.family = Family::kGemma4;
  s.arch = "gemma4";
  DF_ASSIGN(s.n_layer, required_u32(f, p + "block_count"));
  DF_ASSIGN(s.n_embd, required_u32(f, p + "embedding_length"));
  s.n_ctx_train = static_cast<uint32_t>(f.get_u64_or(p + "context_length", 4096));
  const uint32_t L = s.n_layer;
  DF_ASSIGN(const std::vector<uint32_t> n_head, per_layer(f, p + "attention.head_count", L, true, 0));
  DF_ASSIGN(const std::vector<uint32_t> n_head_kv, per_layer(f, p + "attention.head_count_kv", L, false, n_head[0]));
  DF_ASSIGN(const std::vector<uint32_t> n_ff, per_layer(f, p + "feed_forward_length", L, true, 0));
  DF_ASSIGN(const std::vector<uint32_t> pattern, per_layer(f, p + "attention.sliding_window_pattern", L, true, 0));
  DF_ASSIGN(s.sliding_window, required_u32(f, p + "attention.sliding_window"));
  DF_ASSIGN(s.n_embd_per_layer, required_u32(f, p + "embedding_length_per_layer_input", /*zero_ok=*/true));
  DF_ASSIGN(const double eps, f.get_f64(p + "attention.layer_norm_rms_epsilon"));
  s.norm_eps = static_cast<float>(eps);
  if (n_head[0] == 0) return Error{key_error(f, p + "attention.head_count", "is 0")};

  // Head sizes: key_length/value_length are the full layers', the _swa keys the sliding layers'; llama.cpp needs
  // keys and values of one size per kind.
  const uint32_t head_full_k = static_cast<uint32_t>(f.get_u64_or(p + "attention.key_length", s.n_embd / n_head[0]));
  const uint32_t head_full_v = static_cast<uint32_t>(f.get_u64_or(p + "attention.value_length", s.n_embd / n_head[0]));
  DF_ASSIGN(const uint32_t head_swa_k, required_u32(f, p + "attention.key_length_swa"));
  DF_ASSIGN(const uint32_t head_swa_v, required_u32(f, p + "attention.value_length_swa"));
  if (head_full_k != head_full_v || head_full_k == 0 || head_full_k % 2 != 0)
    return Error{f.path + ": metadata " + p + "attention.key_length = " + std::to_string(head_full_k) +
                 " and value_length = " + std::to_string(head_full_v) + " must be equal, even and non-zero (gemma4)"};
  if (head_swa_k != head_swa_v || head_swa_k % 2 != 0)
    return Error{f.path + ": metadata " + p + "attention.key_length_swa = " + std::to_string(head_swa_k) +
                 " and value_length_swa = " + std::to_string(head_swa_v) + " must be equal and even (gemma4)"};
  const uint32_t rot_full = static_cast<uint32_t>(f.get_u64_or(p + "rope.dimension_count", head_full_k));
  const uint32_t rot_swa = static_cast<uint32_t>(f.get_u64_or(p + "rope.dimension_count_swa", rot_full));
  if (rot_full == 0 || rot_full % 2 != 0 || rot_full > head_full_k)
    return Error{f.path + ": metadata " + p + "rope.dimension_count = " + std::to_string(rot_full) +
                 " must be even and at most the head size " + std::to_string(head_full_k)};
  if (rot_swa == 0 || rot_swa % 2 != 0 || rot_swa > head_swa_k)
    return Error{f.path + ": metadata " + p + "rope.dimension_count_swa = " + std::to_string(rot_swa) +
                 " must be even and at most the sliding head size " + std::to_string(head_swa_k)};
  const float base_full = static_cast<float>(f.get_f64_or(p + "rope.freq_base", 10000.0));
  const float base_swa = static_cast<float>(f.get_f64_or(p + "rope.freq_base_swa", 10000.0));
  s.final_logit_softcap = static_cast<float>(f.get_f64_or(p + "final_logit_softcapping", 30.0));

  const uint32_t n_shared = static_cast<uint32_t>(f.get_u64_or(p + "attention.shared_kv_layers", 0));
  if (n_shared > 0 && n_shared + 2 > L)
    return Error{key_error(f, p + "attention.shared_kv_layers",
                           "= " + std::to_string(n_shared) + " leaves fewer than 2 of the " + std::to_string(L) +
                               " layers with their own KV")};
  const uint32_t kv0 = L - n_shared;  // the first layer without KV of its own

  for (uint32_t il = 0; il < L; ++il) {
    LayerSpec l;
    l.sliding = pattern[il] != 0;
    l.n_head = n_head[il];
    l.n_head_kv = n_head_kv[il];
    l.head_dim_k = l.head_dim_v = l.sliding ? head_swa_k : head_full_k;
    l.n_rot = l.sliding ? rot_swa : rot_full;
    l.rope_base = l.sliding ? base_swa : base_full;
    l.n_ff = n_ff[il];
    l.kv_layer = il < kv0 ? il : gemma4_kv_source(kv0, l.sliding);
    if (l.n_head == 0 || l.n_head_kv == 0 || l.n_head % l.n_head_kv != 0)
      return Error{f.path + ": metadata " + p + "attention.head_count_kv: " + layer_text(il) + " has " +
                   std::to_string(l.n_head_kv) + " KV heads for " + std::to_string(l.n_head) + " heads"};
    if (l.n_ff == 0) return Error{f.path + ": metadata " + p + "feed_forward_length: " + layer_text(il) + " has 0"};
    s.layers.push_back(l);
  }
  for (uint32_t il = kv0; il < L; ++il) {
    const LayerSpec& l = s.layers[il];
    const LayerSpec& src = s.layers[l.kv_layer];
    if (src.sliding != l.sliding || src.kv_dim_k() != l.kv_dim_k() || src.n_head_kv != l.n_head_kv)
      return Error{f.path + ": metadata " + p + "attention.shared_kv_layers: " + layer_text(il) + " (" +
                   (l.sliding ? "sliding" : "full") + ") would share the KV of " + layer_text(l.kv_layer) + " (" +
                   (src.sliding ? "sliding" : "full") + ", " + std::to_string(src.n_head_kv) + " KV heads of " +
                   std::to_string(src.head_dim_k) + "), another shape"};
  }

  // The scalars: the largest of each, the full layers' RoPE.
  s.n_head = s.n_head_kv = s.n_ff = 0;
  for (const LayerSpec& l : s.layers) {
    s.n_head = std::max(s.n_head, l.n_head);
    s.n_head_kv = std::max(s.n_head_kv, l.n_head_kv);
    s.n_ff = std::max(s.n_ff, l.n_ff);
  }
  s.head_dim_k = s.head_dim_v = std::max(head_full_k, head_swa_k);
  s.n_rot = rot_full;
  s.rope_base = base_full;
  s.rope_style = RopeStyle::kNeox;
  s.qk_norm = true;
  s.norm_topk = true;

  s.n_expert = static_cast<uint32_t>(f.get_u64_or(p + "expert_count", 0));
  if (s.moe()) {
    DF_ASSIGN(s.n_expert_used, required_u32(f, p + "expert_used_count"));
    if (s.n_expert_used > s.n_expert)
      return Error{f.path + ": metadata " + p + "expert_used_count = " + std::to_string(s.n_expert_used) +
                   " exceeds expert_count " + std::to_string(s.n_expert)};
    DF_ASSIGN(s.n_ff_expert, required_u32(f, p + "expert_feed_forward_length"));
  }
  const gguf::TensorInfo* embd = f.tensor("token_embd.weight");
  if (!embd || embd->shape.size() < 2)
    return Error{f.path + ": tensor token_embd.weight is missing or not 2-D"};
  s.n_vocab = static_cast<uint32_t>(embd->shape[1]);
  return s;
}

Result<ModelTensors> bind_gemma4_tensors(const gguf::File& f, const ModelSpec& s) {
  ModelTensors m;
  const uint64_t E = s.n_embd, V = s.n_vocab, P = s.n_embd_per_layer, L = s.n_layer;
  DF_ASSIGN(m.token_embd, bind_tensor(f, "token_embd.weight", {E, V}, true));
  DF_ASSIGN(m.output_norm, bind_tensor(f, "output_norm.weight", {E}, false));
  DF_ASSIGN(m.output, bind_optional(f, "output.weight", {E, V}, true));
  if (!m.output) m.output = m.token_embd;  // tied, as in the published files
  const bool any_full = std::any_of(s.layers.begin(), s.layers.end(), [](const LayerSpec& l) { return !l.sliding; });
  if (any_full) {
    // One tensor for every full layer, of the full layers' head size.
    uint32_t head_full = 0;
    for (const LayerSpec& l : s.layers)
      if (!l.sliding) head_full = l.head_dim_k;
    DF_ASSIGN(m.rope_freqs, bind_tensor(f, "rope_freqs.weight", {head_full / 2}, false));
  }
  if (P > 0) {
    DF_ASSIGN(m.ple_table, bind_tensor(f, "per_layer_token_embd.weight", {P * L, V}, true));
    DF_ASSIGN(m.ple_model_proj, bind_tensor(f, "per_layer_model_proj.weight", {E, P * L}, true));
    DF_ASSIGN(m.ple_proj_norm, bind_tensor(f, "per_layer_proj_norm.weight", {P}, false));
  }
  for (uint32_t il = 0; il < L; ++il) {
    const LayerSpec& ls = s.layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    const uint64_t D = ls.head_dim_k, Q = ls.q_dim(), KV = ls.kv_dim_k(), F = ls.n_ff;
    const bool own_kv = ls.kv_layer == il;
    LayerTensors l;
    DF_ASSIGN(l.attn_norm, bind_tensor(f, p + "attn_norm.weight", {E}, false));
    DF_ASSIGN(l.wq, bind_tensor(f, p + "attn_q.weight", {E, Q}, true));
    DF_ASSIGN(l.q_norm, bind_tensor(f, p + "attn_q_norm.weight", {D}, false));
    if (own_kv) {
      DF_ASSIGN(l.wk, bind_tensor(f, p + "attn_k.weight", {E, KV}, true));
      DF_ASSIGN(l.k_norm, bind_tensor(f, p + "attn_k_norm.weight", {D}, false));
      DF_ASSIGN(l.wv, bind_optional(f, p + "attn_v.weight", {E, KV}, true));  // absent: V is K's projection
    }
    DF_ASSIGN(l.wo, bind_tensor(f, p + "attn_output.weight", {Q, E}, true));
    DF_ASSIGN(l.attn_post_norm, bind_tensor(f, p + "post_attention_norm.weight", {E}, false));
    DF_ASSIGN(l.out_scale, bind_optional(f, p + "layer_output_scale.weight", {1}, false));
    DF_ASSIGN(l.ffn_norm, bind_tensor(f, p + "ffn_norm.weight", {E}, false));
    DF_ASSIGN(l.ffn_gate, bind_tensor(f, p + "ffn_gate.weight", {E, F}, true));
    DF_ASSIGN(l.ffn_up, bind_tensor(f, p + "ffn_up.weight", {E, F}, true));
    DF_ASSIGN(l.ffn_down, bind_tensor(f, p + "ffn_down.weight", {F, E}, true));
    DF_ASSIGN(l.ffn_post_norm, bind_tensor(f, p + "post_ffw_norm.weight", {E}, false));
    if (s.moe()) {
      // A layer with a router has routed experts (llama.cpp makes the router optional per layer).
      const uint64_t X = s.n_expert, FX = s.n_ff_expert;
      DF_ASSIGN(l.gate_inp, bind_optional(f, p + "ffn_gate_inp.weight", {E, X}, true));
      if (l.gate_inp) {
        DF_ASSIGN(l.router_scale, bind_tensor(f, p + "ffn_gate_inp.scale", {E}, false));
        DF_ASSIGN(l.ffn_pre_norm_2, bind_tensor(f, p + "pre_ffw_norm_2.weight", {E}, false));
        DF_ASSIGN(l.ffn_post_norm_1, bind_tensor(f, p + "post_ffw_norm_1.weight", {E}, false));
        DF_ASSIGN(l.ffn_post_norm_2, bind_tensor(f, p + "post_ffw_norm_2.weight", {E}, false));
        DF_ASSIGN(l.gate_up_exps, bind_optional(f, p + "ffn_gate_up_exps.weight", {E, 2 * FX, X}, true));
        if (!l.gate_up_exps) {
          DF_ASSIGN(l.gate_exps, bind_tensor(f, p + "ffn_gate_exps.weight", {E, FX, X}, true));
          DF_ASSIGN(l.up_exps, bind_tensor(f, p + "ffn_up_exps.weight", {E, FX, X}, true));
        }
        DF_ASSIGN(l.down_exps, bind_tensor(f, p + "ffn_down_exps.weight", {FX, E, X}, true));
        DF_ASSIGN(l.down_exps_scale, bind_optional(f, p + "ffn_down_exps.scale", {X}, false));
      }
    }
    if (P > 0) {
      DF_ASSIGN(l.ple_gate, bind_tensor(f, p + "inp_gate.weight", {E, P}, true));
      DF_ASSIGN(l.ple_proj, bind_tensor(f, p + "proj.weight", {P, E}, true));
      DF_ASSIGN(l.ple_post_norm, bind_tensor(f, p + "post_norm.weight", {E}, false));
    }
    m.layers.push_back(l);
  }
  return m;
}

}  // namespace df::model
