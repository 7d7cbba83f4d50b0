#include "backend/cuda/forward_gemma4.h"

#include <cmath>

#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/cudart/check.h"
#include "diskformer/util/check.h"

namespace df::cuda {

void Gemma4Forward::run(int64_t n, bool all_logits, float* logits) {
  const model::ModelSpec& s = m_.spec;
  const GpuWeights& w = *m_.weights;
  const int64_t E = s.n_embd;
  float* x = at<float>(Buf::x);
  // A layer's end (after its routed experts) opens the next layer's segment.
  for (uint32_t il = 0; il < s.n_layer; ++il) {
    const GpuLayer& l = w.layer(il);
    const ExpertInput in = moe_input(l, il, n);
    segment(il, [&] {
      if (il == 0) {
        get_rows({.table = w.token_embd(), .ids = at<int32_t>(Buf::tok), .n = n, .out = x, .stream = m_.stream});
        scale({.x = x, .n = n * E, .s = std::sqrt(float(E)), .stream = m_.stream});
        if (s.n_embd_per_layer > 0) per_layer_inputs(n);
      } else {
        layer_end(w.layer(il - 1), il - 1, n);
      }
      attention(l, il, n);
      ffn(l, il, n, in);
    });
    if (moe(l)) experts_.run(l, il, n, in.xq, in.fused, at<float>(Buf::moe_out));
  }
  segment(s.n_layer, [&] {
    layer_end(w.layer(s.n_layer - 1), s.n_layer - 1, n);
    const int64_t first = all_logits ? 0 : n - 1, n_out = n - first;
    normed_products(x + first * E, w.output_norm(), n_out, {{&w.output(), logits}});
    if (s.final_logit_softcap != 0.0f)
      softcap({.x = logits, .n = n_out * int64_t(s.n_vocab), .cap = s.final_logit_softcap, .stream = m_.stream});
  });
}

Forward::ExpertInput Gemma4Forward::moe_input(const GpuLayer& l, uint32_t il, int64_t n) const {
  if (!moe(l)) return {};
  // The two-launch decode path where it applies and gate and up take the norm's Q8_0 blocks.
  const model::ExpertWeights ew = experts_.matrices(l, il);
  const model::Mat* gate_up[] = {&ew.gate, &ew.up};
  const bool fused = n <= kDecodeMaxTok &&
                     moe_decode_gate_up_supported(ew.gate, ew.up, n, int(m_.spec.n_expert_used)) && q8_inputs(gate_up);
  return {.xq = fused ? at<uint8_t>(Buf::scratch) : nullptr, .fused = fused};
}

void Gemma4Forward::layer_end(const GpuLayer& l, uint32_t il, int64_t n) {
  const model::ModelSpec& s = m_.spec;
  // The layer's output scale goes with its last residual add: this one unless a per-layer input block follows.
  if (moe(l)) {
    // The experts' sum normed, plus the dense MLP's output normed, normed again into the residual stream.
    moe_post_norms({.a = at<float>(Buf::moe_out), .wa = l.ffn_post_norm_2.f32(), .b = at<float>(Buf::ffn_out),
                    .wb = l.ffn_post_norm_1.f32(), .w = l.ffn_post_norm.f32(), .x = at<float>(Buf::x),
                    .then_scale = s.n_embd_per_layer == 0 ? l.out_scale.f32() : nullptr, .n_rows = n,
                    .cols = int64_t(s.n_embd), .eps = s.norm_eps, .stream = m_.stream});
  }
  if (s.n_embd_per_layer > 0) ple_block(l, il, n);
}

void Gemma4Forward::add_normed(const float* y, const model::Mat& weight, int64_t n, const float* then_scale) {
  rms_norm({.x = y, .weight = weight.f32(), .n_rows = n, .cols = int64_t(m_.spec.n_embd), .eps = m_.spec.norm_eps,
            .stream = m_.stream, .add_to = at<float>(Buf::x), .then_scale = then_scale});
}

void Gemma4Forward::per_layer_inputs(int64_t n) {
  const model::ModelSpec& s = m_.spec;
  const GpuWeights& w = *m_.weights;
  const int64_t E = s.n_embd, P = s.n_embd_per_layer, LP = int64_t(s.n_layer) * P;
  float* rows = at<float>(Buf::ple_rows);
  float* pl = at<float>(Buf::ple);
  // The table's rows (resident, or the row cache's slots through its id map), scaled by sqrt(P).
  if (const cache::DeviceRowCache* c = m_.ple_rows) {
    const model::Mat slots{.type = w.ple_table().type, .data = c->slot_data(), .cols = w.ple_table().cols,
                           .rows = int64_t(c->slots()), .row_bytes = w.ple_table().row_bytes};
    get_rows({.table = slots, .ids = at<int32_t>(Buf::tok), .slot_of = c->slot_map(), .n_ids = int64_t(c->rows()),
              .n = n, .out = rows, .stream = m_.stream});
  } else {
    get_rows({.table = w.ple_table(), .ids = at<int32_t>(Buf::tok), .n = n, .out = rows, .stream = m_.stream});
  }
  scale({.x = rows, .n = n * LP, .s = std::sqrt(float(P)), .stream = m_.stream});
  // The projection of the scaled embedding by 1 / sqrt(E), normed per layer, plus the rows, by 1 / sqrt(2).
  product(w.ple_model_proj(), at<float>(Buf::x), n, pl);
  scale({.x = pl, .n = n * LP, .s = 1.0f / std::sqrt(float(E)), .stream = m_.stream});
  rms_norm({.x = pl, .weight = w.ple_proj_norm(), .y = pl, .n_rows = n * int64_t(s.n_layer), .cols = P,
            .eps = s.norm_eps, .stream = m_.stream});
  add({.x = pl, .y = rows, .n = n * LP, .stream = m_.stream});
  scale({.x = pl, .n = n * LP, .s = 1.0f / std::sqrt(2.0f), .stream = m_.stream});
}

void Gemma4Forward::attention(const GpuLayer& l, uint32_t il, int64_t n) {
  const model::ModelSpec& s = m_.spec;
  const model::LayerSpec& ls = s.layers[il];
  const int H = int(ls.n_head), Hkv = int(ls.n_head_kv), D = int(ls.head_dim_k);
  const bool own_kv = ls.kv_layer == il;
  const uint32_t C = o_.n_ctx;
  float *q = at<float>(Buf::q), *k = at<float>(Buf::k), *v = at<float>(Buf::v), *x = at<float>(Buf::x);
  if (!own_kv) {
    normed_products(x, l.attn_norm.f32(), n, {{&l.wq, q}});
  } else if (l.wv.data) {
    normed_products(x, l.attn_norm.f32(), n, {{&l.wq, q}, {&l.wk, k}, {&l.wv, v}});
  } else {
    normed_products(x, l.attn_norm.f32(), n, {{&l.wq, q}, {&l.wk, k}});
    // K's raw projection doubles as V (before K's norm and RoPE).
    DF_CUDA_CHECK(cudaMemcpyAsync(v, k, uint64_t(n) * ls.kv_dim_k() * 4, cudaMemcpyDeviceToDevice, m_.stream));
  }
  uint16_t* kc = at<uint16_t>(Buf::k_cache) + kv_.k[il];
  uint16_t* vc = at<uint16_t>(Buf::v_cache) + kv_.v[il];
  const int32_t* pos = at<int32_t>(Buf::pos);
  // Full layers rotate by the frequencies divided by rope_freqs (in their table); v is normed without a weight.
  qk_norm_rope_store({.q = q, .k = own_kv ? k : nullptr, .v = v, .q_norm = l.q_norm.f32(), .k_norm = l.k_norm.f32(),
                      .eps = s.norm_eps, .n_head = H, .n_head_kv = Hkv, .head_dim_k = D, .head_dim_v = D,
                      .n_rot = int(ls.n_rot), .n_tok = n, .pos = pos,
                      .table = at<float>(ls.sliding ? Buf::rope_swa : Buf::rope), .n_pos = C,
                      .style = model::RopeStyle::kNeox, .k_cache = kc, .v_cache = vc, .n_ctx = C,
                      .stream = m_.stream, .v_norm = true});
  // A layer that shares KV reads its source's cache, which the source filled for this batch already. A window that
  // masks nothing in this batch (its last position within the window, known on the host) is left out, so that
  // prompts take the tensor-core kernel.
  const int64_t W = s.sliding_window;
  const bool masks = ls.sliding && (first_pos_ < 0 || first_pos_ + n > W);
  cuda::attention({.q = q, .k = kc, .v = vc, .out = at<float>(Buf::attn), .pos = pos, .n_head = H, .n_head_kv = Hkv,
                   .head_dim_k = D, .head_dim_v = D, .n_tok = n, .scale = 1.0f, .stream = m_.stream, .n_ctx = C,
                   .work = at<float>(Buf::attn_work), .window = masks ? W : 0});
  float* proj = at<float>(Buf::proj);
  product(l.wo, at<float>(Buf::attn), n, proj);
  add_normed(proj, l.attn_post_norm, n, nullptr);
}

void Gemma4Forward::ffn(const GpuLayer& l, uint32_t il, int64_t n, const ExpertInput& in) {
  const model::ModelSpec& s = m_.spec;
  const int64_t E = s.n_embd, F = s.layers[il].n_ff;
  float *x = at<float>(Buf::x), *gate = at<float>(Buf::gate), *up = at<float>(Buf::up);
  // The dense MLP: GeGLU.
  float* f = at<float>(moe(l) ? Buf::ffn_out : Buf::proj);
  normed_products(x, l.ffn_norm.f32(), n, {{&l.ffn_gate, gate}, {&l.ffn_up, up}});
  gated_product(l.ffn_down, gate, {.on = true, .act = Glu::kGelu, .mul = up, .mul_stride = F}, n, f);
  if (!moe(l)) {
    // The layer's output scale goes with its last residual add: this one unless a per-layer input block follows.
    add_normed(f, l.ffn_post_norm, n, s.n_embd_per_layer == 0 ? l.out_scale.f32() : nullptr);
    return;
  }
  const int K = int(s.n_expert_used);
  // The next layer's experts, guessed from this residual (streamed decode), before xn and scratch are reused.
  if (il + 1 < s.n_layer) experts_.guess(m_.weights->layer(il + 1), n);
  // The router reads norm(x) / sqrt(E) * router_scale; softmax over all experts, the top K renormalized, each
  // weight times its expert's output scale.
  float* xn = at<float>(Buf::xn);
  rms_norm({.x = x, .weight = l.router_scale.f32(), .y = xn, .n_rows = n, .cols = E, .eps = s.norm_eps,
            .stream = m_.stream, .scale = 1.0f / std::sqrt(float(E))});
  product(l.gate_inp, xn, n, at<float>(Buf::router));
  route({.logits = at<float>(Buf::router), .n_tok = n, .n_expert = int(s.n_expert), .n_used = K, .norm_topk = true,
         .ids = at<int32_t>(Buf::ids), .weights = at<float>(Buf::wts), .stream = m_.stream,
         .expert_scale = l.down_exps_scale.f32()});
  // The experts' input: norm(x) pre_ffw_norm_2 (and its Q8_0 blocks for the two-launch decode path).
  const model::ExpertWeights ew = experts_.matrices(l, il);
  const model::Mat* gate_up[] = {&ew.gate, &ew.up};
  const uint8_t* xq =
      norm_input(x, l.ffn_pre_norm_2.f32(), n, in.fused ? std::span(gate_up) : std::span<const model::Mat*>());
  DF_CHECK(xq == in.xq);
  experts_.fetch(il, n);
}

void Gemma4Forward::ple_block(const GpuLayer& l, uint32_t il, int64_t n) {
  const model::ModelSpec& s = m_.spec;
  const int64_t P = s.n_embd_per_layer;
  float *x = at<float>(Buf::x), *g = at<float>(Buf::ple_gate), *y = at<float>(Buf::proj);
  // gelu(W_gate x) times this layer's per-layer input, projected back to n_embd, normed, added.
  product(l.ple_gate, x, n, g);
  gated_product(l.ple_proj, g,
                {.on = true, .act = Glu::kGelu, .mul = at<float>(Buf::ple) + int64_t(il) * P,
                 .mul_stride = int64_t(s.n_layer) * P},
                n, y);
  add_normed(y, l.ple_post_norm, n, l.out_scale.f32());
}

}  // namespace df::cuda
