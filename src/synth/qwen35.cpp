#include <cmath>

#include "synth/planned.h"

namespace df::synth {

std::vector<Planned> plan_qwen35moe_tensors(const Shape& s, gguf::GgmlType type, std::optional<Mix> mix,
                                            uint64_t n_vocab) {
  std::vector<Planned> p;
  const MixModel mm{.n_layer = s.n_layer, .n_head = s.n_head, .n_head_kv = s.n_head_kv, .n_expert = s.n_expert};
  const uint64_t d = s.d_model, q_dim = uint64_t{s.n_head} * s.head_dim, kv_dim = uint64_t{s.n_head_kv} * s.head_dim;
  const uint64_t k_dim = uint64_t{s.ssm_k_heads} * s.ssm_state, v_dim = uint64_t{s.ssm_v_heads} * s.ssm_state;
  const uint64_t conv_dim = 2 * k_dim + v_dim;
  auto mat = [&](std::string name, uint64_t n_in, uint64_t n_out, uint64_t n_exp = 0) {
    std::vector<uint64_t> shape{n_in, n_out};
    if (n_exp) shape.push_back(n_exp);
    const gguf::GgmlType t = mix ? mix_tensor_type(*mix, mm, name, shape) : type;
    p.push_back({std::move(name), t, std::move(shape), Planned::Matrix, 1.0f / std::sqrt(float(n_in))});
  };
  auto norm = [&](std::string name, uint64_t n) {
    p.push_back({std::move(name), gguf::GgmlType::F32, {n}, Planned::Norm, 0});
  };
  auto router = [&](std::string name, std::vector<uint64_t> shape) {
    p.push_back({std::move(name), gguf::GgmlType::F32, std::move(shape), Planned::Router, 1.0f / std::sqrt(float(d))});
  };
  auto uniform = [&](std::string name, std::vector<uint64_t> shape, float lo, float hi) {
    p.push_back({std::move(name), gguf::GgmlType::F32, std::move(shape), Planned::Uniform, 0, lo, hi});
  };
  mat("token_embd.weight", d, n_vocab);
  for (uint32_t l = 0; l < s.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", d);
    if ((l + 1) % s.full_attention_interval != 0) {
      mat(b + "attn_qkv.weight", d, conv_dim);
      mat(b + "attn_gate.weight", d, v_dim);
      // The ranges of trained models: a short convolution of moderate taps, a decay that keeps exp(g) below 1
      // (ssm_a = -exp(A_log) < 0) and a small step (dt_bias well below 0).
      uniform(b + "ssm_conv1d.weight", {s.ssm_conv, conv_dim}, -0.5f, 0.5f);
      uniform(b + "ssm_dt.bias", {s.ssm_v_heads}, -7.0f, -3.0f);
      uniform(b + "ssm_a", {s.ssm_v_heads}, -16.0f, -1.0f);
      mat(b + "ssm_beta.weight", d, s.ssm_v_heads);
      mat(b + "ssm_alpha.weight", d, s.ssm_v_heads);
      norm(b + "ssm_norm.weight", s.ssm_state);
      mat(b + "ssm_out.weight", v_dim, d);
    } else {
      mat(b + "attn_q.weight", d, 2 * q_dim);  // each head's query, then its output gate
      mat(b + "attn_k.weight", d, kv_dim);
      mat(b + "attn_v.weight", d, kv_dim);
      mat(b + "attn_output.weight", q_dim, d);
      norm(b + "attn_q_norm.weight", s.head_dim);
      norm(b + "attn_k_norm.weight", s.head_dim);
    }
    norm(b + "post_attention_norm.weight", d);
    router(b + "ffn_gate_inp.weight", {d, s.n_expert});
    mat(b + "ffn_gate_exps.weight", d, s.expert_ff, s.n_expert);
    mat(b + "ffn_up_exps.weight", d, s.expert_ff, s.n_expert);
    mat(b + "ffn_down_exps.weight", s.expert_ff, d, s.n_expert);
    router(b + "ffn_gate_inp_shexp.weight", {d});
    mat(b + "ffn_gate_shexp.weight", d, s.shared_ff);
    mat(b + "ffn_up_shexp.weight", d, s.shared_ff);
    mat(b + "ffn_down_shexp.weight", s.shared_ff, d);
  }
  norm("output_norm.weight", d);
  mat("output.weight", d, n_vocab);
  return p;
}

}  // namespace df::synth
