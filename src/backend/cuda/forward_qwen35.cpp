#include "backend/cuda/forward_qwen35.h"

#include <cmath>

#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

HybridForward::HybridForward(const GpuModel& m, std::vector<DeviceBuffer>& buf, const GpuSessionOptions& o)
    : Forward(m, buf, o) {
  const model::ModelSpec& s = m.spec;
  DF_CHECK(s.moe() && s.attn_gate && s.n_ff_shared > 0);
  uint32_t recurrent = 0, kv = 0;
  for (uint32_t il = 0; il < s.n_layer; ++il) slot_.push_back(s.is_recurrent(il) ? recurrent++ : kv++);
}

void HybridForward::run(int64_t n, bool all_logits, float* logits) {
  const model::ModelSpec& s = m_.spec;
  const GpuWeights& w = *m_.weights;
  DF_CHECK(save_after_ == 0 || (save_after_ > 0 && save_after_ < n && !replay_));
  float* x = at<float>(Buf::x);
  for (uint32_t il = 0; il < s.n_layer; ++il) {
    const GpuLayer& l = w.layer(il);
    const ExpertInput in = expert_input(l, il, n);
    segment(il, [&] {
      if (il == 0)
        get_rows({.table = w.token_embd(), .ids = at<int32_t>(Buf::tok), .n = n, .out = x, .stream = m_.stream});
      if (s.is_recurrent(il)) {
        delta_net(l, slot_[il], n);
      } else {
        gated_attention(l, slot_[il], n);
      }
      ffn_block(l, il, n, in);
    });
    // The shared expert before the routed ones, queued after the router's choices were fetched: where the experts
    // stream, the GPU computes it while the host plans them, off the path from one layer's experts to the next's.
    experts_.fetched();
    segment(s.n_layer + 1 + il, [&] { shared_expert(l, n, in.xq); });
    experts_.run(l, il, n, in.xq, in.fused);
  }
  save_after_ = 0;
  segment(s.n_layer, [&] {
    const int64_t first = all_logits ? 0 : n - 1, n_out = n - first;
    normed_products(x + first * int64_t(s.n_embd), w.output_norm(), n_out, {{&w.output(), logits}});
  });
}

void HybridForward::delta_net(const GpuLayer& l, uint32_t slot, int64_t n) {
  const model::ModelSpec& s = m_.spec;
  const model::DeltaNetSpec& d = s.delta_net;
  const int64_t C = d.conv_dim(), Kd = d.k_dim(), Vd = d.v_dim(), W = d.conv_kernel - 1;
  const int64_t Hv = d.n_v_heads, S = d.head_dim;
  float *mixed = at<float>(Buf::ssm_mixed), *conv = at<float>(Buf::ssm_conv), *z = at<float>(Buf::ssm_z);
  float *alpha = at<float>(Buf::ssm_alpha), *beta = at<float>(Buf::ssm_beta), *core = at<float>(Buf::ssm_core);
  const model::Mat* ws[] = {&l.ssm_qkv, &l.ssm_z, &l.ssm_beta, &l.ssm_alpha};
  const uint8_t* xq = norm_input(at<float>(Buf::x), l.attn_norm.f32(), n, ws);
  products(n, xq, {{&l.ssm_qkv, mixed}, {&l.ssm_z, z}, {&l.ssm_beta, beta}});
  products(n, xq, {{&l.ssm_alpha, alpha}});

  // This layer's window and state (and their copies) in the layout of buffers.h's recurrent_state_bytes.
  const uint64_t conv_floats = recurrent_conv_floats(s);
  auto conv_at = [&](Buf b) { return at<float>(b) + uint64_t(slot) * W * C; };
  auto ssm_at = [&](Buf b) { return at<float>(b) + conv_floats + uint64_t(slot) * Hv * S * S; };
  const bool save = save_after_ > 0;
  causal_conv1d_silu({.x = mixed, .n_tok = n, .channels = C, .w = l.ssm_conv.f32(), .kernel = int(d.conv_kernel),
                      .window = conv_at(Buf::rec_state), .y = conv, .save = save ? conv_at(Buf::rec_save) : nullptr,
                      .save_after = save_after_, .stream = m_.stream});
  l2_norm_heads({.x = conv, .n_tok = n, .stride = C, .n_heads = 2 * int(d.n_k_heads), .head_dim = int(S),
                 .eps = s.norm_eps, .stream = m_.stream});
  gated_delta_rule({.q = conv, .k = conv + Kd, .v = conv + 2 * Kd, .stride = C, .alpha = alpha, .beta = beta,
                    .dt_bias = l.ssm_dt_bias.f32(), .a_scale = l.ssm_a.f32(), .state = ssm_at(Buf::rec_state),
                    .out = core, .n_tok = n, .n_k_heads = int(d.n_k_heads), .n_v_heads = int(Hv),
                    .head_dim = int(S), .save = save ? ssm_at(Buf::rec_save) : nullptr, .save_after = save_after_,
                    .work = at<float>(Buf::ssm_chunks), .stream = m_.stream});
  // The gated norm per v head: rmsnorm(out) * ssm_norm * silu(z).
  rms_norm({.x = core, .weight = l.ssm_norm.f32(), .y = core, .n_rows = n * Hv, .cols = S, .eps = s.norm_eps,
            .stream = m_.stream});
  glu({.gate = z, .up = core, .y = core, .n = n * Vd, .stream = m_.stream});
  add_product(l.ssm_out, core, n);
}

void HybridForward::gated_attention(const GpuLayer& l, uint32_t kv, int64_t n) {
  const model::ModelSpec& s = m_.spec;
  const int hk = int(s.head_dim_k), hv = int(s.head_dim_v);
  const int64_t kd = s.kv_dim_k(), vd = s.kv_dim_v();
  const uint32_t C = o_.n_ctx;
  float *q_gate = at<float>(Buf::q_gate), *q = at<float>(Buf::q), *k = at<float>(Buf::k), *v = at<float>(Buf::v);
  float* attn = at<float>(Buf::attn);
  normed_products(at<float>(Buf::x), l.attn_norm.f32(), n, {{&l.wq, q_gate}, {&l.wk, k}, {&l.wv, v}});
  split_query({.q_gate = q_gate, .q = q, .n_tok = n, .n_head = int(s.n_head), .head_dim = hk, .stream = m_.stream});
  const int32_t* pos = at<int32_t>(Buf::pos);
  uint16_t* kc = at<uint16_t>(Buf::k_cache) + uint64_t(kv) * C * kd;
  uint16_t* vc = at<uint16_t>(Buf::v_cache) + uint64_t(kv) * C * vd;
  qk_norm_rope_store({.q = q, .k = k, .v = v, .q_norm = l.q_norm.f32(), .k_norm = l.k_norm.f32(), .eps = s.norm_eps,
                      .n_head = int(s.n_head), .n_head_kv = int(s.n_head_kv), .head_dim_k = hk, .head_dim_v = hv,
                      .n_rot = int(s.n_rot), .n_tok = n, .pos = pos, .table = at<float>(Buf::rope), .n_pos = C,
                      .style = s.rope_style, .k_cache = kc, .v_cache = vc, .n_ctx = C, .stream = m_.stream});
  attention({.q = q, .k = kc, .v = vc, .out = attn, .pos = pos, .n_head = int(s.n_head),
             .n_head_kv = int(s.n_head_kv), .head_dim_k = hk, .head_dim_v = hv, .n_tok = n,
             .scale = 1.0f / std::sqrt(float(hk)), .stream = m_.stream, .n_ctx = C,
             .work = at<float>(Buf::attn_work)});
  sigmoid_gate({.x = attn, .q_gate = q_gate, .n_tok = n, .n_head = int(s.n_head), .head_dim = hv,
                .stream = m_.stream});
  add_product(l.wo, attn, n);
}

void HybridForward::shared_expert(const GpuLayer& l, int64_t n, uint8_t* xq) {
  const model::ModelSpec& s = m_.spec;
  float *gate = at<float>(Buf::gate), *up = at<float>(Buf::up), *logit = at<float>(Buf::sh_logit);
  float* out = at<float>(Buf::proj);
  const model::Mat* gate_up[] = {&l.gate_shexp, &l.up_shexp};
  // Where its products can take xq and quantize nothing into scratch themselves (the f32 gate row, the down
  // product's input quantized inside its blocks), four launches; otherwise each product quantizes its input.
  const bool on_xq = xq != nullptr && q8_inputs(gate_up) && l.gate_shexp.type == l.up_shexp.type &&
                     decode_matvec_supported(l.gate_shexp, n) && !q8_activation_type(l.gate_inp_shexp.type) &&
                     quantizes_in_blocks(l.down_shexp, n);
  if (on_xq) {
    products(n, xq, {{&l.gate_shexp, gate}, {&l.up_shexp, up}});
    products(n, nullptr, {{&l.gate_inp_shexp, logit}});
    product(l.down_shexp, gate, n, out, /*accumulate=*/false,
            {.on = true, .mul = up, .mul_stride = int64_t(s.n_ff_shared)});
  } else {
    products(n, nullptr, {{&l.gate_shexp, gate}, {&l.up_shexp, up}, {&l.gate_inp_shexp, logit}});
    glu({.gate = gate, .up = up, .y = gate, .n = n * int64_t(s.n_ff_shared), .stream = m_.stream});
    matmul({.w = l.down_shexp, .x = gate, .n_tok = n, .y = out, .scratch = at<uint8_t>(Buf::scratch),
            .stream = m_.stream, .dequant = at<uint8_t>(Buf::dequant)});
    // The routed experts read xq after this, from scratch, which these products used.
    if (xq != nullptr)
      quantize_q8_0({.x = at<float>(Buf::xn), .y = xq, .n_rows = n, .cols = int64_t(s.n_embd), .stream = m_.stream});
  }
  add_sigmoid_scaled({.x = at<float>(Buf::x), .y = out, .logit = logit, .n_tok = n, .n = int64_t(s.n_embd),
                      .stream = m_.stream});
}

}  // namespace df::cuda
