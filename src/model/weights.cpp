#include "diskformer/model/weights.h"

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

std::string matmul_type_names() {
  std::string s;
  for (auto t : kMatmulTypes) s += (s.empty() ? "" : ", ") + std::string(gguf::type_name(t));
  return s;
}

std::vector<const gguf::TensorInfo*> LayerTensors::dense() const {
  std::vector<const gguf::TensorInfo*> out;
  for (auto* t : {attn_norm, wq, wk, wv, wo, q_norm, k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down, gate_inp, ssm_qkv,
                  ssm_z, ssm_conv, ssm_dt_bias, ssm_a, ssm_beta, ssm_alpha, ssm_norm, ssm_out, gate_inp_shexp,
                  gate_shexp, up_shexp, down_shexp})
    if (t) out.push_back(t);
  return out;
}

Result<ModelTensors> bind_tensors(const gguf::File& f, const ModelSpec& s) {
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
