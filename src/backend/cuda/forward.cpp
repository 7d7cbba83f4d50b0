#include "backend/cuda/forward.h"

#include <algorithm>
#include <cmath>

#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

void Forward::run(int64_t n, bool all_logits, float* logits) {
  const model::ModelSpec& s = m_.spec;
  const GpuWeights& w = *m_.weights;
  const int64_t E = s.n_embd;
  float* x = at<float>(Buf::x);
  for (uint32_t il = 0; il < s.n_layer; ++il) {
    const GpuLayer& l = w.layer(il);
    const ExpertInput in = expert_input(l, il, n);
    // Each sublayer norms x into xn and adds its output back into x.
    segment(il, [&] {
      if (il == 0)
        get_rows({.table = w.token_embd(), .ids = at<int32_t>(Buf::tok), .n = n, .out = x, .stream = m_.stream});
      attention_block(l, il, n);
      ffn_block(l, il, n, in);
    });
    if (s.moe()) experts_.run(l, il, n, in.xq, in.fused);
  }
  segment(s.n_layer, [&] {
    const int64_t first = all_logits ? 0 : n - 1, n_out = n - first;
    normed_products(x + first * E, w.output_norm(), n_out, {{&w.output(), logits}});
  });
}

bool Forward::q8_inputs(std::span<const model::Mat* const> ws) const {
  bool q8 = ws.size() > 0;
  for (const model::Mat* w : ws) q8 = q8 && q8_activation_type(w->type) && w->cols == int64_t(m_.spec.n_embd);
  return q8;
}

const uint8_t* Forward::norm_input(const float* x, const float* weight, int64_t n,
                                   std::span<const model::Mat* const> ws) {
  const model::ModelSpec& s = m_.spec;
  const int64_t E = s.n_embd;
  if (!q8_inputs(ws)) {
    rms_norm({.x = x, .weight = weight, .y = at<float>(Buf::xn), .n_rows = n, .cols = E, .eps = s.norm_eps,
              .stream = m_.stream});
    return nullptr;
  }
  rms_norm_q8({.x = x, .weight = weight, .y = at<float>(Buf::xn), .y_q8 = at<uint8_t>(Buf::scratch), .n_rows = n,
               .cols = E, .eps = s.norm_eps, .stream = m_.stream});
  return at<uint8_t>(Buf::scratch);
}

void Forward::normed_products(const float* x, const float* norm, int64_t n,
                              std::initializer_list<std::pair<const model::Mat*, float*>> outs) {
  DF_CHECK(outs.size() >= 1 && outs.size() <= 3);
  bool fused = true;
  for (const auto& [w, y] : outs)
    fused = fused && q8_activation_type(w->type) && w->cols == int64_t(m_.spec.n_embd) &&
            decode_matvec_supported(*w, n);
  if (fused) {
    // A launch per weight type (q and k in Q4_K, v in Q6_K: two), each block norming x itself: fewer launches
    // than one norm and a product each.
    bool done[3] = {};
    const auto* o = outs.begin();
    for (size_t i = 0; i < outs.size(); ++i) {
      if (done[i]) continue;
      DecodeMatvecArgs d{.n_parts = 0, .x = x, .n_tok = n, .stream = m_.stream, .norm = norm,
                         .eps = m_.spec.norm_eps};
      for (size_t j = i; j < outs.size(); ++j)
        if (!done[j] && o[j].first->type == o[i].first->type) {
          d.parts[d.n_parts++] = {.w = *o[j].first, .y = o[j].second};
          done[j] = true;
        }
      decode_matvec(d);
    }
    return;
  }
  const model::Mat* ws[3];
  size_t n_ws = 0;
  for (const auto& [w, y] : outs) ws[n_ws++] = w;
  const uint8_t* xq = norm_input(x, norm, n, std::span(ws, n_ws));
  products(n, xq, outs);
}

void Forward::products(int64_t n, const uint8_t* xq, std::initializer_list<std::pair<const model::Mat*, float*>> outs) {
  DF_CHECK(outs.size() >= 1 && outs.size() <= 3);
  bool fused = xq != nullptr;
  for (const auto& [w, y] : outs)
    fused = fused && decode_matvec_supported(*w, n) && w->type == outs.begin()->first->type;
  if (fused) {
    DecodeMatvecArgs d{.n_parts = int(outs.size()), .x = at<float>(Buf::xn), .x_q8 = xq, .n_tok = n,
                       .stream = m_.stream};
    int i = 0;
    for (const auto& [w, y] : outs) d.parts[i++] = {.w = *w, .y = y};
    decode_matvec(d);
    return;
  }
  for (const auto& [w, y] : outs)
    matmul({.w = *w, .x = at<float>(Buf::xn), .n_tok = n, .y = y, .scratch = at<uint8_t>(Buf::scratch),
            .stream = m_.stream, .x_q8 = xq, .dequant = at<uint8_t>(Buf::dequant)});
}

bool Forward::quantizes_in_blocks(const model::Mat& w, int64_t n) {
  return decode_matvec_supported(w, n) && n * w.cols <= 4096;
}

void Forward::add_product(const model::Mat& w, const float* in, int64_t n, const uint8_t* in_q8) {
  product(w, in, n, at<float>(Buf::x), /*accumulate=*/true, {}, in_q8);
}

// For a few tokens one decode_matvec launch (adding into y in its epilogue) on in_q8 where the producer wrote it
// (the attention's merge; DecodeThroughput: 6.3 against 9.1 us for the o projection), else quantizing `in` (its
// gate applied) in each of its blocks while that is at most two batches of Q8_0 blocks per warp (its weight loads are
// in flight meanwhile), else once beforehand (one small launch); else matmul (into proj, then the add, where it
// accumulates), the same roundings.
void Forward::product(const model::Mat& w, const float* in, int64_t n, float* y, bool accumulate,
                      const InputGate& gate, const uint8_t* in_q8) {
  DF_CHECK(in_q8 == nullptr || !gate.on);
  uint8_t* scratch = at<uint8_t>(Buf::scratch);
  if (decode_matvec_supported(w, n)) {
    const bool per_block = in_q8 == nullptr && quantizes_in_blocks(w, n);
    const uint8_t* xq = in_q8 != nullptr ? in_q8 : per_block ? nullptr : scratch;
    if (!per_block && in_q8 == nullptr)
      quantize_q8_0({.x = in, .y = scratch, .n_rows = n, .cols = w.cols, .stream = m_.stream, .gate = gate});
    DecodeMatvecArgs d{.n_parts = 1, .x = in, .x_q8 = xq, .n_tok = n, .stream = m_.stream,
                       .gate = per_block ? gate : InputGate{}};
    d.parts[0] = {.w = w, .y = y, .residual = accumulate ? y : nullptr};
    decode_matvec(d);
    return;
  }
  DF_CHECK(!gate.on);  // gated_product applies it first
  float* out = accumulate ? at<float>(Buf::proj) : y;
  DF_CHECK(out != in);
  matmul({.w = w, .x = in, .n_tok = n, .y = out, .scratch = scratch, .stream = m_.stream,
          .dequant = at<uint8_t>(Buf::dequant)});
  if (accumulate) add({.x = y, .y = out, .n = n * w.rows, .stream = m_.stream});
}

void Forward::gated_product(const model::Mat& w, float* in, const InputGate& gate, int64_t n, float* y,
                            bool accumulate) {
  if (decode_matvec_supported(w, n)) {
    product(w, in, n, y, accumulate, gate);
    return;
  }
  // The activation in place, as its own launch.
  if (gate.act == Glu::kGelu) {
    gelu({.x = in, .m = gate.mul, .m_stride = gate.mul_stride, .y = in, .n_rows = n, .cols = w.cols,
          .stream = m_.stream});
  } else {
    DF_CHECK(gate.mul != nullptr && gate.mul_stride == w.cols);
    glu({.gate = in, .up = gate.mul, .y = in, .n = n * w.cols, .stream = m_.stream});
  }
  product(w, in, n, y, accumulate);
}

void Forward::attention_block(const GpuLayer& l, uint32_t il, int64_t n) {
  const model::ModelSpec& s = m_.spec;
  const int hk = int(s.head_dim_k), hv = int(s.head_dim_v);
  const int64_t kd = s.kv_dim_k(), vd = s.kv_dim_v();
  const uint32_t C = o_.n_ctx;
  float *q = at<float>(Buf::q), *k = at<float>(Buf::k), *v = at<float>(Buf::v);
  normed_products(at<float>(Buf::x), l.attn_norm.f32(), n, {{&l.wq, q}, {&l.wk, k}, {&l.wv, v}});
  const int32_t* pos = at<int32_t>(Buf::pos);
  const int64_t qd = int64_t(s.n_head) * hk, od = int64_t(s.n_head) * hv;
  // The output projection's Q8_0 input, written by the attention's last launch, where decode_matvec takes wo.
  uint8_t* oq = decode_matvec_supported(l.wo, n) && hv % 32 == 0 ? at<uint8_t>(Buf::scratch) : nullptr;
  // q-norm, k-norm, RoPE and the f16 KV store in one launch, then attention over the cache: for all n tokens in this
  // session's cache, or token by token in each one's own.
  auto attend = [&](int64_t first, int64_t count, uint16_t* k_cache, uint16_t* v_cache) {
    uint16_t* kc = k_cache + uint64_t(il) * C * kd;  // kv_layout's offsets for these families
    uint16_t* vc = v_cache + uint64_t(il) * C * vd;
    qk_norm_rope_store({.q = q + first * qd, .k = k + first * kd, .v = v + first * vd,
                        .q_norm = s.qk_norm ? l.q_norm.f32() : nullptr,
                        .k_norm = s.qk_norm ? l.k_norm.f32() : nullptr, .eps = s.norm_eps, .n_head = int(s.n_head),
                        .n_head_kv = int(s.n_head_kv), .head_dim_k = hk, .head_dim_v = hv, .n_rot = int(s.n_rot),
                        .n_tok = count, .pos = pos + first, .table = at<float>(Buf::rope), .n_pos = C,
                        .style = s.rope_style, .k_cache = kc, .v_cache = vc, .n_ctx = C, .stream = m_.stream});
    attention({.q = q + first * qd, .k = kc, .v = vc, .out = at<float>(Buf::attn) + first * od, .pos = pos + first,
               .n_head = int(s.n_head), .n_head_kv = int(s.n_head_kv), .head_dim_k = hk, .head_dim_v = hv,
               .n_tok = count, .scale = 1.0f / std::sqrt(float(hk)), .stream = m_.stream, .n_ctx = C,
               .work = at<float>(Buf::attn_work),
               .out_q8 = oq ? oq + q8_scratch_bytes(l.wo.type, od, first) : nullptr});
  };
  if (token_caches_.empty()) {
    attend(0, n, at<uint16_t>(Buf::k_cache), at<uint16_t>(Buf::v_cache));
  } else {
    DF_CHECK(int64_t(token_caches_.size()) == n);
    for (int64_t t = 0; t < n; ++t) attend(t, 1, token_caches_[size_t(t)].k, token_caches_[size_t(t)].v);
  }
  add_product(l.wo, at<float>(Buf::attn), n, oq);
}

Forward::ExpertInput Forward::expert_input(const GpuLayer& l, uint32_t il, int64_t n) const {
  if (!m_.spec.moe()) return {};
  // A few tokens of quantized experts: the two-launch path, on xn's Q8_0 blocks where gate and up both take them.
  // Streamed experts live in the GPU tier's slots, which have the layout of the file's experts.
  const model::ExpertWeights w = experts_.matrices(l, il);
  const bool fused = n <= kDecodeMaxTok && moe_decode_gate_up_supported(w.gate, w.up, n, int(m_.spec.n_expert_used));
  const model::Mat* gate_up[] = {&w.gate, &w.up};
  return {.xq = fused && q8_inputs(gate_up) ? at<uint8_t>(Buf::scratch) : nullptr, .fused = fused};
}

void Forward::ffn_block(const GpuLayer& l, uint32_t il, int64_t n, const ExpertInput& in) {
  const model::ModelSpec& s = m_.spec;
  float *gate = at<float>(Buf::gate), *up = at<float>(Buf::up);
  if (!s.moe()) {
    normed_products(at<float>(Buf::x), l.ffn_norm.f32(), n, {{&l.ffn_gate, gate}, {&l.ffn_up, up}});
    gated_product(l.ffn_down, gate, {.on = true, .mul = up, .mul_stride = int64_t(s.n_ff)}, n, at<float>(Buf::x),
                  /*accumulate=*/true);
    return;
  }
  const int K = int(s.n_expert_used);
  // The next layer's experts, guessed from this residual before this layer's norm replaces xn (streamed decode).
  if (il + 1 < s.n_layer) experts_.guess(m_.weights->layer(il + 1), n);
  if (normed_router_supported(l.gate_inp, n)) {
    // The norm inside the router's launch; it leaves xn (and its Q8_0 blocks) as norm_input would.
    normed_router({.w = l.gate_inp, .x = at<float>(Buf::x), .norm = l.ffn_norm.f32(), .eps = s.norm_eps, .n_tok = n,
                   .y = at<float>(Buf::router), .xn = at<float>(Buf::xn), .xq = in.xq, .stream = m_.stream});
  } else {
    const model::ExpertWeights w = experts_.matrices(l, il);
    const model::Mat* gate_up[] = {&w.gate, &w.up};
    const uint8_t* xq = norm_input(at<float>(Buf::x), l.ffn_norm.f32(), n,
                                   in.fused ? std::span(gate_up) : std::span<const model::Mat*>());
    DF_CHECK(xq == in.xq);
    matmul({.w = l.gate_inp, .x = at<float>(Buf::xn), .n_tok = n, .y = at<float>(Buf::router),
            .scratch = at<uint8_t>(Buf::scratch), .stream = m_.stream, .x_q8 = xq});
  }
  route({.logits = at<float>(Buf::router), .n_tok = n, .n_expert = int(s.n_expert), .n_used = K,
         .norm_topk = s.norm_topk, .ids = at<int32_t>(Buf::ids), .weights = at<float>(Buf::wts),
         .stream = m_.stream});
  experts_.fetch(il, n);
}

}  // namespace df::cuda
