#include "diskformer/backend/cpu/forward_gemma4.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "diskformer/util/check.h"

namespace df::cpu {

namespace {

// y = x * s elementwise (ggml_scale, ggml_mul by a broadcast scalar): one rounding.
void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

// Each of n rows of `width`: y = norm(y) * weight, in place (weight nullptr: no multiply).
void norm_rows(Context& ctx, float* y, const model::Mat& weight, int64_t n, int64_t width, float eps) {
  const float* w = weight.present() ? weight.f32() : nullptr;
  ctx.for_rows(n, kRowGrain, [&](int64_t t) { rms_norm(y + t * width, w, width, eps, y + t * width); });
}

}  // namespace

Status Gemma4Forward::run(std::span<const int32_t> tokens, KvCache& kv, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t E = s_.n_embd;
  const float eps = s_.norm_eps;
  DF_TRY(check_batch(s_, tokens, kv));

  for (auto* v : {&b_.x, &b_.xn, &b_.attn_out, &b_.proj, &b_.mlp}) ensure_size(*v, n * E);
  // The embedding scaled by sqrt(d) (text tokens; llama.cpp does not scale embeddings given as input).
  const float embd_scale = std::sqrt(float(E));
  DF_TRY(gather_rows(w_.token_embd, w_.token_rows, tokens, b_.x.data()));
  scale(b_.x.data(), n * E, embd_scale);
  if (s_.n_embd_per_layer > 0) DF_TRY(per_layer_inputs(tokens));

  model::LayerWeights streamed;
  for (uint32_t il = 0; il < s_.n_layer; ++il) {
    DF_ASSIGN(const model::LayerWeights* lw, dense_layer(w_, il, s_.n_layer, layer_pin_, streamed));
    float* x = b_.x.data();
    float* a = b_.attn_out.data();
    float* f = b_.proj.data();

    // Attention, normed after as well as before, then the residual.
    ctx_.for_rows(n, kRowGrain,
                  [&](int64_t t) { rms_norm(x + t * E, lw->attn_norm.f32(), E, eps, b_.xn.data() + t * E); });
    attention(*lw, il, n, kv);
    norm_rows(ctx_, f, lw->attn_post_norm, n, E, eps);
    add(ctx_, f, x, n * E, a);
    guess_.clear();
    if (n == 1 && il + 1 < s_.n_layer) guess_experts(il + 1);

    // Feed-forward: the dense MLP, and in a MoE layer the routed experts beside it, each normed, then summed.
    ctx_.for_rows(n, kRowGrain,
                  [&](int64_t t) { rms_norm(a + t * E, lw->ffn_norm.f32(), E, eps, b_.xn.data() + t * E); });
    if (lw->gate_inp.present()) {
      mlp(*lw, il, n, b_.xn.data(), b_.mlp.data());
      norm_rows(ctx_, b_.mlp.data(), lw->ffn_post_norm_1, n, E, eps);
      DF_TRY(routed_experts(*lw, il, n));
      norm_rows(ctx_, f, lw->ffn_post_norm_2, n, E, eps);
      add(ctx_, b_.mlp.data(), f, n * E, f);
    } else {
      mlp(*lw, il, n, b_.xn.data(), f);
    }
    norm_rows(ctx_, f, lw->ffn_post_norm, n, E, eps);
    add(ctx_, f, a, n * E, x);

    if (s_.n_embd_per_layer > 0) ple_block(*lw, il, n);
    if (lw->out_scale.present()) scale(x, n * E, lw->out_scale.f32()[0]);
  }
  layer_pin_.release();
  kv.n_past += static_cast<uint32_t>(n);

  // The head for the rows asked for, then the soft cap c tanh(logits / c).
  const int64_t first = all_logits ? 0 : n - 1, n_out = n - first;
  for (int64_t t = first; t < n; ++t)
    rms_norm(b_.x.data() + t * E, w_.output_norm.f32(), E, eps, b_.xn.data() + (t - first) * E);
  b_.logits.resize(uint64_t(n_out) * s_.n_vocab);
  matmul(w_.output, b_.xn.data(), n_out, b_.logits.data());
  if (const float c = s_.final_logit_softcap; c != 0.0f) {
    const float inv = 1.0f / c;
    for (float& l : b_.logits) l = std::tanh(l * inv) * c;
  }
  stats_.tokens += uint64_t(n);
  return {};
}

void Gemma4Forward::matmul(const model::Mat& w, const float* x, int64_t n, float* y) {
  const MatmulJob job{&w, x, n, y};
  matmul_many(ctx_, std::span<const MatmulJob>(&job, 1));
}

Status Gemma4Forward::per_layer_inputs(std::span<const int32_t> tokens) {
  const int64_t n = int64_t(tokens.size()), E = s_.n_embd, P = s_.n_embd_per_layer, LP = int64_t(s_.n_layer) * P;
  ensure_size(b_.ple, n * LP);
  ensure_size(b_.ple_rows, n * LP);
  float* rows = b_.ple_rows.data();
  DF_TRY(gather_rows(w_.ple_table, w_.ple_rows, tokens, rows));
  scale(rows, n * LP, std::sqrt(float(P)));
  // The projection of the scaled embedding, normed per layer, added to the table's rows.
  float* pl = b_.ple.data();
  matmul(w_.ple_model_proj, b_.x.data(), n, pl);
  scale(pl, n * LP, 1.0f / std::sqrt(float(E)));
  norm_rows(ctx_, pl, w_.ple_proj_norm, n * int64_t(s_.n_layer), P, s_.norm_eps);
  const float half = 1.0f / std::sqrt(2.0f);
  for (int64_t i = 0; i < n * LP; ++i) pl[i] = (pl[i] + rows[i]) * half;
  return {};
}

void Gemma4Forward::attention(const model::LayerWeights& lw, uint32_t il, int64_t n, KvCache& kv) {
  const model::LayerSpec& l = s_.layers[il];
  const int H = int(l.n_head), Hkv = int(l.n_head_kv), D = int(l.head_dim_k);
  const int64_t qd = l.q_dim(), kd = l.kv_dim_k();
  const bool own_kv = l.kv_layer == il;
  const float eps = s_.norm_eps;
  ensure_size(b_.q, n * qd);
  ensure_size(b_.k, n * kd);
  ensure_size(b_.v, n * kd);
  ensure_size(b_.attn, n * qd);
  std::vector<MatmulJob> jobs = {{&lw.wq, b_.xn.data(), n, b_.q.data()}};
  if (own_kv) {
    jobs.push_back({&lw.wk, b_.xn.data(), n, b_.k.data()});
    if (lw.wv.present()) jobs.push_back({&lw.wv, b_.xn.data(), n, b_.v.data()});
  }
  matmul_many(ctx_, jobs);
  // Full layers rotate by frequencies divided by rope_freqs ("proportional" RoPE: the pairs past a quarter of the
  // head barely turn).
  const float* ff = l.sliding ? nullptr : w_.rope_freqs.f32();
  ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
    const int64_t pos = kv.n_past + t;
    float* q = b_.q.data() + t * qd;
    for (int h = 0; h < H; ++h) rms_norm(q + h * D, lw.q_norm.f32(), D, eps, q + h * D);
    RopeAngles angles;  // q's and k's
    rope_angles(int(l.n_rot), pos, l.rope_base, ff, angles);
    rope_rotate(q, H, D, int(l.n_rot), model::RopeStyle::kNeox, angles);
    if (!own_kv) return;
    float* k = b_.k.data() + t * kd;
    float* v = b_.v.data() + t * kd;
    if (!lw.wv.present()) std::copy_n(k, kd, v);  // K's raw projection doubles as V
    for (int h = 0; h < Hkv; ++h) {
      rms_norm(k + h * D, lw.k_norm.f32(), D, eps, k + h * D);
      rms_norm(v + h * D, nullptr, D, eps, v + h * D);
    }
    rope_rotate(k, Hkv, D, int(l.n_rot), model::RopeStyle::kNeox, angles);
    ctx_.kernels->to_f16(k, kv.k_at(il, uint32_t(pos)), kd);
    ctx_.kernels->to_f16(v, kv.v_at(il, uint32_t(pos)), kd);
  });
  // A layer that shares KV reads its source's cache, which the source filled for this batch already.
  cpu::attention(ctx_, {.q = b_.q.data(),
                        .k = kv.k_at(il, 0),
                        .v = kv.v_at(il, 0),
                        .out = b_.attn.data(),
                        .n_head = H,
                        .n_head_kv = Hkv,
                        .head_dim_k = D,
                        .head_dim_v = D,
                        .pos0 = kv.n_past,
                        .n_tok = n,
                        .scale = 1.0f,
                        .window = l.sliding ? int64_t(s_.sliding_window) : 0});
  matmul(lw.wo, b_.attn.data(), n, b_.proj.data());
}

void Gemma4Forward::mlp(const model::LayerWeights& lw, uint32_t il, int64_t n, const float* in, float* out) {
  const int64_t F = s_.layers[il].n_ff;
  ensure_size(b_.gate, n * F);
  ensure_size(b_.up, n * F);
  const MatmulJob gate_up[] = {{&lw.ffn_gate, in, n, b_.gate.data()},
                               {&lw.ffn_up, in, n, b_.up.data()}};
  matmul_many(ctx_, gate_up);
  geglu(ctx_, b_.gate.data(), b_.up.data(), n * F, b_.gate.data());
  matmul(lw.ffn_down, b_.gate.data(), n, out);
}

void Gemma4Forward::router_input(const model::LayerWeights& lw, const float* a, int64_t n, float* out) {
  const int64_t E = s_.n_embd;
  const float inv_sqrt_d = 1.0f / std::sqrt(float(E));
  const float* rs = lw.router_scale.f32();
  ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
    float* y = out + t * E;
    rms_norm(a + t * E, nullptr, E, s_.norm_eps, y);
    for (int64_t i = 0; i < E; ++i) y[i] = (y[i] * inv_sqrt_d) * rs[i];
  });
}

void Gemma4Forward::guess_experts(uint32_t next) {
  // The next block's router applied to this block's residual picks its experts well enough to start their reads
  // while this block computes. Worth the product only where experts stream.
  if (!s_.moe() || !w_.expert_tier || w_.expert_tier->resident() || w_.layers.empty()) return;
  const model::LayerWeights& lw = w_.layers[next];
  if (!lw.gate_inp.present()) return;
  const int64_t E = s_.n_embd, X = s_.n_expert;
  std::vector<float> in(E), p(X);
  router_input(lw, b_.attn_out.data(), 1, in.data());
  Context one{.kernels = ctx_.kernels};
  cpu::matmul(one, lw.gate_inp, in.data(), 1, p.data());
  top_k_ids(p.data(), X, s_.n_expert_used, guess_);
}

Status Gemma4Forward::routed_experts(const model::LayerWeights& lw, uint32_t il, int64_t n) {
  const int64_t E = s_.n_embd, X = s_.n_expert, K = s_.n_expert_used;
  ensure_size(b_.router, n * E);
  ensure_size(b_.probs, n * X);
  ensure_size(b_.expert_out, n * K * E);
  router_input(lw, b_.attn_out.data(), n, b_.router.data());
  matmul(lw.gate_inp, b_.router.data(), n, b_.probs.data());
  // Softmax over all experts, the top K by probability, their weights renormalized over the K.
  route_top_k(ctx_, b_.probs.data(), n, X, K, /*renormalize=*/true, route_);
  stats_.expert_uses += uint64_t(n * K);
  if (routing_) routing_->record(il, route_.sel.data(), n);

  // The experts' input: norm(a) pre_ffw_norm_2 (xn is free: the dense MLP has read it).
  ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
    rms_norm(b_.attn_out.data() + t * E, lw.ffn_pre_norm_2.f32(), E, s_.norm_eps, b_.xn.data() + t * E);
  });
  DF_TRY(routed_expert_rows(ctx_,
                            {.tier = w_.expert_tier, .layout = &w_.layouts->experts[il], .layer = il, .n_expert = X,
                             .n_embd = E, .guess = guess_, .act = GateActivation::kGeGlu},
                            route_, n, b_.xn.data(), b_.expert_out.data(), b_.routed));
  // Each output times its expert's scale, then its weight, summed in routing order as llama.cpp adds the views.
  const float* es = lw.down_exps_scale.present() ? lw.down_exps_scale.f32() : nullptr;
  ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
    float* out = b_.proj.data() + t * E;
    for (int64_t k = 0; k < K; ++k) {
      const float* eo = b_.expert_out.data() + (t * K + k) * E;
      const float w = route_.weight[t * K + k], sc = es ? es[route_.sel[t * K + k]] : 1.0f;
      for (int64_t i = 0; i < E; ++i) {
        const float y = (es ? eo[i] * sc : eo[i]) * w;
        out[i] = k == 0 ? y : out[i] + y;
      }
    }
  });
  return {};
}

void Gemma4Forward::ple_block(const model::LayerWeights& lw, uint32_t il, int64_t n) {
  const int64_t E = s_.n_embd, P = s_.n_embd_per_layer, L = s_.n_layer;
  ensure_size(b_.ple_gate, n * P);
  float* g = b_.ple_gate.data();
  matmul(lw.ple_gate, b_.x.data(), n, g);
  gelu(g, n * P, g);
  for (int64_t t = 0; t < n; ++t) {
    const float* pl = b_.ple.data() + (t * L + il) * P;
    for (int64_t i = 0; i < P; ++i) g[t * P + i] *= pl[i];
  }
  float* y = b_.proj.data();
  matmul(lw.ple_proj, g, n, y);
  norm_rows(ctx_, y, lw.ple_post_norm, n, E, s_.norm_eps);
  add(ctx_, b_.x.data(), y, n * E, b_.x.data());
}

}  // namespace df::cpu
