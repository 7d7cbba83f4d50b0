#include "diskformer/model/qwen35.h"

#include "tensor_binder.h"

namespace df::model {

namespace {

Result<uint32_t> need_u32(const gguf::File& f, const std::string& key) {
  DF_ASSIGN(uint64_t v, f.get_u64(key));
  if (v == 0 || v > (1u << 30))
    return Error{f.path + ": metadata " + key + " = " + std::to_string(v) + " is out of range"};
  return static_cast<uint32_t>(v);
}

// llama.cpp rotates pair i of the first n_rot dims by the angle of one of four position components, chosen by
// rope.dimension_sections in an interleaved pattern (IMROPE): t for i % 3 == 0, h for 1, w for 2, each while i is
// below three times its section, the fourth component otherwise. Text gives the first three the token's position
// and the fourth 0; the forward rotates every pair by the token's position, so each must get one of the three.
Status check_rope_sections(const gguf::File& f, const std::string& key, const ModelSpec& s) {
  DF_ASSIGN(const gguf::Array* a, f.get_array(key));
  int64_t sec[4] = {};
  if (a->items.size() < 3 || a->items.size() > 4)
    return Error{f.path + ": metadata " + key + " has " + std::to_string(a->items.size()) + " entries, expected 4"};
  for (size_t i = 0; i < a->items.size(); ++i) {
    const auto v = a->items[i].to_i64();
    if (!v || *v < 0) return Error{f.path + ": metadata " + key + "[" + std::to_string(i) + "] is not a count"};
    sec[i] = *v;
  }
  const int64_t dims = sec[0] + sec[1] + sec[2] + sec[3];
  if (dims <= 0) return Error{f.path + ": metadata " + key + " are all zero"};
  for (int64_t i = 0; i < int64_t(s.n_rot / 2); ++i) {
    const int64_t sector = i % dims;
    const bool text = (sector % 3 == 0 && sector < 3 * sec[0]) || (sector % 3 == 1 && sector < 3 * sec[1]) ||
                      (sector % 3 == 2 && sector < 3 * sec[2]);
    if (!text)
      return Error{f.path + ": metadata " + key + " leaves rotary pair " + std::to_string(i) +
                   " to the fourth position component, which text does not use (unsupported)"};
  }
  return {};
}

}  // namespace

Status read_qwen35moe_spec(const gguf::File& f, ModelSpec& s) {
  const std::string p = s.arch + ".";
  s.n_layer_nextn = static_cast<uint32_t>(f.get_u64_or(p + "nextn_predict_layers", 0));
  if (s.n_layer_nextn >= s.n_layer)
    return Error{f.path + ": metadata " + p + "nextn_predict_layers = " + std::to_string(s.n_layer_nextn) +
                 " leaves no main layers of block_count " + std::to_string(s.n_layer)};
  const uint32_t n_all = s.n_layer;
  s.n_layer -= s.n_layer_nextn;
  if (s.head_dim_k != s.head_dim_v)
    return Error{f.path + ": metadata " + p + "attention.key_length and value_length differ (" +
                 std::to_string(s.head_dim_k) + ", " + std::to_string(s.head_dim_v) + ")"};

  DeltaNetSpec& d = s.delta_net;
  DF_ASSIGN(d.conv_kernel, need_u32(f, p + "ssm.conv_kernel"));
  DF_ASSIGN(d.head_dim, need_u32(f, p + "ssm.state_size"));
  DF_ASSIGN(d.n_k_heads, need_u32(f, p + "ssm.group_count"));
  DF_ASSIGN(d.n_v_heads, need_u32(f, p + "ssm.time_step_rank"));
  DF_ASSIGN(const uint32_t inner, need_u32(f, p + "ssm.inner_size"));
  if (d.n_v_heads % d.n_k_heads != 0)
    return Error{f.path + ": metadata " + p + "ssm.time_step_rank = " + std::to_string(d.n_v_heads) +
                 " (v heads) is not a multiple of ssm.group_count = " + std::to_string(d.n_k_heads)};
  if (inner != d.v_dim())
    return Error{f.path + ": metadata " + p + "ssm.inner_size = " + std::to_string(inner) +
                 " is not ssm.state_size x ssm.time_step_rank = " + std::to_string(d.v_dim())};

  s.recurrent.assign(s.n_layer, false);
  if (const gguf::Value* v = f.find(p + "attention.recurrent_layers")) {
    const gguf::Array* a = v->array();
    if (!a || a->items.size() != n_all)
      return Error{f.path + ": metadata " + p + "attention.recurrent_layers must be an array of block_count = " +
                   std::to_string(n_all) + " booleans"};
    for (uint32_t il = 0; il < s.n_layer; ++il) s.recurrent[il] = a->items[il].to_bool().value_or(false);
  } else {
    const uint64_t interval = f.get_u64_or(p + "full_attention_interval", 4);
    if (interval == 0) return Error{f.path + ": metadata " + p + "full_attention_interval is 0"};
    for (uint32_t il = 0; il < s.n_layer; ++il) s.recurrent[il] = (il + 1) % interval != 0;
  }

  s.attn_gate = true;
  s.qk_norm = true;
  s.rope_style = RopeStyle::kNeox;
  DF_TRY(check_rope_sections(f, p + "rope.dimension_sections", s));
  s.n_ff_shared = static_cast<uint32_t>(f.get_u64_or(p + "expert_shared_feed_forward_length", s.n_ff));
  if (s.n_ff_shared == 0)
    return Error{f.path + ": metadata " + p +
                 "expert_shared_feed_forward_length is missing (the shared expert's width)"};
  return {};
}

Result<LayerTensors> bind_qwen35moe_layer(const gguf::File& f, const ModelSpec& s, uint32_t il) {
  Binder b{f};
  LayerTensors l;
  const std::string p = "blk." + std::to_string(il) + ".";
  const uint64_t E = s.n_embd;
  DF_ASSIGN(l.attn_norm, b.need(p + "attn_norm.weight", {E}, false));
  if (s.is_recurrent(il)) {
    const DeltaNetSpec& d = s.delta_net;
    DF_ASSIGN(l.ssm_qkv, b.need(p + "attn_qkv.weight", {E, d.conv_dim()}, true));
    DF_ASSIGN(l.ssm_z, b.need(p + "attn_gate.weight", {E, d.v_dim()}, true));
    DF_ASSIGN(l.ssm_conv, b.need(p + "ssm_conv1d.weight", {d.conv_kernel, d.conv_dim()}, false));
    DF_ASSIGN(l.ssm_dt_bias, b.need(p + "ssm_dt.bias", {d.n_v_heads}, false));
    DF_ASSIGN(l.ssm_a, b.need(p + "ssm_a", {d.n_v_heads}, false));
    DF_ASSIGN(l.ssm_beta, b.need(p + "ssm_beta.weight", {E, d.n_v_heads}, true));
    DF_ASSIGN(l.ssm_alpha, b.need(p + "ssm_alpha.weight", {E, d.n_v_heads}, true));
    DF_ASSIGN(l.ssm_norm, b.need(p + "ssm_norm.weight", {d.head_dim}, false));
    DF_ASSIGN(l.ssm_out, b.need(p + "ssm_out.weight", {d.v_dim(), E}, true));
  } else {
    DF_ASSIGN(l.wq, b.need(p + "attn_q.weight", {E, 2 * uint64_t(s.q_dim())}, true));
    DF_ASSIGN(l.wk, b.need(p + "attn_k.weight", {E, s.kv_dim_k()}, true));
    DF_ASSIGN(l.wv, b.need(p + "attn_v.weight", {E, s.kv_dim_v()}, true));
    DF_ASSIGN(l.wo, b.need(p + "attn_output.weight", {uint64_t(s.n_head) * s.head_dim_v, E}, true));
    DF_ASSIGN(l.q_norm, b.need(p + "attn_q_norm.weight", {s.head_dim_k}, false));
    DF_ASSIGN(l.k_norm, b.need(p + "attn_k_norm.weight", {s.head_dim_k}, false));
  }
  DF_ASSIGN(l.ffn_norm, b.need(p + "post_attention_norm.weight", {E}, false));
  const uint64_t F = s.n_ff_expert, X = s.n_expert, Fs = s.n_ff_shared;
  DF_ASSIGN(l.gate_inp, b.need(p + "ffn_gate_inp.weight", {E, X}, true));
  DF_ASSIGN(l.gate_exps, b.need(p + "ffn_gate_exps.weight", {E, F, X}, true));
  DF_ASSIGN(l.up_exps, b.need(p + "ffn_up_exps.weight", {E, F, X}, true));
  DF_ASSIGN(l.down_exps, b.need(p + "ffn_down_exps.weight", {F, E, X}, true));
  DF_ASSIGN(l.gate_inp_shexp, b.need(p + "ffn_gate_inp_shexp.weight", {E}, true));
  DF_ASSIGN(l.gate_shexp, b.need(p + "ffn_gate_shexp.weight", {E, Fs}, true));
  DF_ASSIGN(l.up_shexp, b.need(p + "ffn_up_shexp.weight", {E, Fs}, true));
  DF_ASSIGN(l.down_shexp, b.need(p + "ffn_down_shexp.weight", {Fs, E}, true));
  return l;
}

}  // namespace df::model
