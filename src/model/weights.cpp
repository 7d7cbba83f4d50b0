#include "diskformer/model/weights.h"

#include "diskformer/model/gemma4.h"
#include "diskformer/model/qwen35.h"
#include "tensor_binder.h"

namespace df::model {

namespace {

constexpr gguf::GgmlType kMatmulTypes[] = {
    gguf::GgmlType::F32,  gguf::GgmlType::F16,  gguf::GgmlType::BF16, gguf::GgmlType::Q8_0,   gguf::GgmlType::Q4_0,
    gguf::GgmlType::Q4_1, gguf::GgmlType::Q5_0, gguf::GgmlType::Q5_1, gguf::GgmlType::IQ4_NL, gguf::GgmlType::Q2_K,
    gguf::GgmlType::Q3_K, gguf::GgmlType::Q4_K, gguf::GgmlType::Q5_K, gguf::GgmlType::Q6_K,   gguf::GgmlType::IQ4_XS,
};

}  // namespace

bool matmul_type_supported(gguf::GgmlType t) {
  for (auto s : kMatmulTypes)
    if (s == t) return true;
  return false;
}

std::span<const LayerField> layer_fields() {
  using T = LayerTensors;
  using W = LayerWeights;
  static constexpr LayerField kFields[] = {
      {&T::attn_norm, &W::attn_norm},
      {&T::wq, &W::wq},
      {&T::wk, &W::wk},
      {&T::wv, &W::wv},
      {&T::wo, &W::wo},
      {&T::q_norm, &W::q_norm},
      {&T::k_norm, &W::k_norm},
      {&T::ffn_norm, &W::ffn_norm},
      {&T::ffn_gate, &W::ffn_gate},
      {&T::ffn_up, &W::ffn_up},
      {&T::ffn_down, &W::ffn_down},
      {&T::gate_inp, &W::gate_inp},
      {&T::attn_post_norm, &W::attn_post_norm},
      {&T::ffn_post_norm, &W::ffn_post_norm},
      {&T::out_scale, &W::out_scale},
      {&T::router_scale, &W::router_scale},
      {&T::ffn_pre_norm_2, &W::ffn_pre_norm_2},
      {&T::ffn_post_norm_1, &W::ffn_post_norm_1},
      {&T::ffn_post_norm_2, &W::ffn_post_norm_2},
      {&T::down_exps_scale, &W::down_exps_scale},
      {&T::ple_gate, &W::ple_gate},
      {&T::ple_proj, &W::ple_proj},
      {&T::ple_post_norm, &W::ple_post_norm},
      {&T::ssm_qkv, &W::ssm_qkv},
      {&T::ssm_z, &W::ssm_z},
      {&T::ssm_conv, &W::ssm_conv},
      {&T::ssm_dt_bias, &W::ssm_dt_bias},
      {&T::ssm_a, &W::ssm_a},
      {&T::ssm_beta, &W::ssm_beta},
      {&T::ssm_alpha, &W::ssm_alpha},
      {&T::ssm_norm, &W::ssm_norm},
      {&T::ssm_out, &W::ssm_out},
      {&T::gate_inp_shexp, &W::gate_inp_shexp},
      {&T::gate_shexp, &W::gate_shexp},
      {&T::up_shexp, &W::up_shexp},
      {&T::down_shexp, &W::down_shexp},
  };
  return kFields;
}

std::string matmul_type_names() {
  std::string s;
  for (auto t : kMatmulTypes) s += (s.empty() ? "" : ", ") + std::string(gguf::type_name(t));
  return s;
}

std::vector<const gguf::TensorInfo*> LayerTensors::dense() const {
  std::vector<const gguf::TensorInfo*> out;
  for (const LayerField& fl : layer_fields())
    if (this->*fl.tensor) out.push_back(this->*fl.tensor);
  return out;
}

std::vector<const gguf::TensorInfo*> ModelTensors::globals() const {
  std::vector<const gguf::TensorInfo*> out;
  for (auto* t : {rope_freqs, ple_model_proj, ple_proj_norm})
    if (t) out.push_back(t);
  return out;
}

Result<const gguf::TensorInfo*> bind_tensor(const gguf::File& f, const std::string& name, std::vector<uint64_t> want,
                                            bool matmul) {
  return Binder{f}.need(name, std::move(want), matmul);
}

Result<const gguf::TensorInfo*> bind_optional(const gguf::File& f, const std::string& name,
                                              std::vector<uint64_t> want, bool matmul) {
  const gguf::TensorInfo* t = f.tensor(name);
  if (!t) return static_cast<const gguf::TensorInfo*>(nullptr);
  return Binder{f}.check(t, std::move(want), matmul);
}

Result<ModelTensors> bind_tensors(const gguf::File& f, const ModelSpec& s) {
  if (s.family == Family::kGemma4) return bind_gemma4_tensors(f, s);
  Binder b{f};
  ModelTensors m;
  const uint64_t E = s.n_embd, V = s.n_vocab;
  DF_ASSIGN(m.token_embd, b.need("token_embd.weight", {E, V}, true));
  DF_ASSIGN(m.output_norm, b.need("output_norm.weight", {E}, false));
  if (f.tensor("output.weight")) {
    DF_ASSIGN(m.output, b.need("output.weight", {E, V}, true));
  } else {
    m.output = m.token_embd;
  }
  for (uint32_t il = 0; il < s.n_layer; ++il) {
    if (s.family == Family::kQwen35Moe) {
      DF_ASSIGN(LayerTensors l, bind_qwen35moe_layer(f, s, il));
      m.layers.push_back(l);
      continue;
    }
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerTensors l;
    DF_ASSIGN(l.attn_norm, b.need(p + "attn_norm.weight", {E}, false));
    DF_ASSIGN(l.wq, b.need(p + "attn_q.weight", {E, s.q_dim()}, true));
    DF_ASSIGN(l.wk, b.need(p + "attn_k.weight", {E, s.kv_dim_k()}, true));
    DF_ASSIGN(l.wv, b.need(p + "attn_v.weight", {E, s.kv_dim_v()}, true));
    DF_ASSIGN(l.wo, b.need(p + "attn_output.weight", {uint64_t(s.n_head) * s.head_dim_v, E}, true));
    if (s.qk_norm) {
      DF_ASSIGN(l.q_norm, b.need(p + "attn_q_norm.weight", {s.head_dim_k}, false));
      DF_ASSIGN(l.k_norm, b.need(p + "attn_k_norm.weight", {s.head_dim_k}, false));
    }
    DF_ASSIGN(l.ffn_norm, b.need(p + "ffn_norm.weight", {E}, false));
    if (s.moe()) {
      const uint64_t F = s.n_ff_expert, X = s.n_expert;
      DF_ASSIGN(l.gate_inp, b.need(p + "ffn_gate_inp.weight", {E, X}, true));
      DF_ASSIGN(l.gate_exps, b.need(p + "ffn_gate_exps.weight", {E, F, X}, true));
      DF_ASSIGN(l.up_exps, b.need(p + "ffn_up_exps.weight", {E, F, X}, true));
      DF_ASSIGN(l.down_exps, b.need(p + "ffn_down_exps.weight", {F, E, X}, true));
    } else {
      const uint64_t F = s.n_ff;
      DF_ASSIGN(l.ffn_gate, b.need(p + "ffn_gate.weight", {E, F}, true));
      DF_ASSIGN(l.ffn_up, b.need(p + "ffn_up.weight", {E, F}, true));
      DF_ASSIGN(l.ffn_down, b.need(p + "ffn_down.weight", {F, E}, true));
    }
    m.layers.push_back(l);
  }
  return m;
}

Mat mat_of(const gguf::TensorInfo& t, const uint8_t* data) {
  Mat m;
  m.type = t.type;
  m.data = data;
  m.cols = static_cast<int64_t>(t.shape.empty() ? 0 : t.shape[0]);
  m.rows = static_cast<int64_t>(t.rows());
  m.row_bytes = t.row_bytes();
  return m;
}

}  // namespace df::model
