#include "diskformer/backend/cpu/forward.h"

#include <algorithm>
#include <cmath>

#include "diskformer/util/check.h"

namespace df::cpu {

Status check_batch(const model::ModelSpec& s, std::span<const int32_t> tokens, const KvCache& kv) {
  const uint64_t n = tokens.size();
  if (n == 0) return Error{"forward: empty batch"};
  if (kv.n_past + n > kv.n_ctx)
    return Error{"context overflow: " + std::to_string(kv.n_past) + " positions used + " + std::to_string(n) +
                 " new tokens exceed the context size " + std::to_string(kv.n_ctx) + " (-c)"};
  for (uint64_t t = 0; t < n; ++t)
    if (tokens[t] < 0 || uint32_t(tokens[t]) >= s.n_vocab)
      return Error{"token id " + std::to_string(tokens[t]) + " at batch position " + std::to_string(t) +
                   " is outside the vocabulary of " + std::to_string(s.n_vocab)};
  return {};
}

void rope_cache_attend(Context& ctx, const model::ModelSpec& s, KvCache& kv, uint32_t il, int64_t n, float* q,
                       float* k, const float* v, float* attn) {
  const int hk = int(s.head_dim_k), hv = int(s.head_dim_v);
  const int64_t qd = s.q_dim(), kd = s.kv_dim_k(), vd = s.kv_dim_v();
  ctx.for_rows(n, kRowGrain, [&](int64_t t) {
    const int64_t pos = kv.n_past + t;
    RopeAngles angles;
    rope_angles(int(s.n_rot), pos, s.rope_base, nullptr, angles);
    rope_rotate(q + t * qd, int(s.n_head), hk, int(s.n_rot), s.rope_style, angles);
    rope_rotate(k + t * kd, int(s.n_head_kv), hk, int(s.n_rot), s.rope_style, angles);
    ctx.kernels->to_f16(k + t * kd, kv.k_at(il, uint32_t(pos)), kd);
    ctx.kernels->to_f16(v + t * vd, kv.v_at(il, uint32_t(pos)), vd);
  });
  attention(ctx, {.q = q,
                  .k = kv.k_at(il, 0),
                  .v = kv.v_at(il, 0),
                  .out = attn,
                  .n_head = int(s.n_head),
                  .n_head_kv = int(s.n_head_kv),
                  .head_dim_k = hk,
                  .head_dim_v = hv,
                  .pos0 = kv.n_past,
                  .n_tok = n,
                  .scale = 1.0f / std::sqrt(float(hk))});
}

Result<const model::LayerWeights*> dense_layer(const ForwardWeights& w, uint32_t il, uint32_t n_layer,
                                               cache::Pins& pin, model::LayerWeights& streamed) {
  if (!w.layers.empty()) return &w.layers[il];
  pin.release();
  const int32_t zero = 0;
  DF_ASSIGN(pin, w.layer_tier->acquire(il, std::span<const int32_t>(&zero, 1)));
  w.layer_tier->prefetch((il + 1) % n_layer, std::span<const int32_t>(&zero, 1));
  streamed = model::layer_at(w.layouts->layers[il], pin.data(0));
  return &streamed;
}

Status Forward::run(std::span<const int32_t> tokens, KvCache& kv, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t E = s_.n_embd;
  DF_TRY(check_batch(s_, tokens, kv));

  one_row_ = false;  // llama.cpp's orders for a batch of n (attention: its tiled kernel from kTiledRows queries)
  ensure_size(b_.x, n * E);
  ensure_size(b_.xn, n * E);
  ensure_size(b_.proj, n * E);
  DF_TRY(gather_rows(w_.token_embd, w_.token_rows, tokens, b_.x.data()));

  model::LayerWeights streamed;
  for (uint32_t il = 0; il < s_.n_layer; ++il) {
    DF_ASSIGN(const model::LayerWeights* lw, dense_layer(w_, il, s_.n_layer, layer_pin_, streamed));
    // Attention sublayer with a residual connection.
    ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
      rms_norm(b_.x.data() + t * E, lw->attn_norm.f32(), E, s_.norm_eps, b_.xn.data() + t * E);
    });
    DF_TRY(attention_block(*lw, il, n, kv));
    add(ctx_, b_.x.data(), b_.proj.data(), n * E, b_.x.data());
    guess_.clear();
    if (n == 1 && il + 1 < s_.n_layer) guess_experts(il + 1);
    // Feed-forward sublayer with a residual connection. As llama.cpp does, the last block feeds forward only the
    // rows whose logits are asked for (its products then take their one-row orders); routing statistics want
    // every token's route.
    const int64_t f0 = il + 1 == s_.n_layer && !all_logits && !routing_ ? n - 1 : 0, nf = n - f0;
    float* xf = b_.x.data() + f0 * E;
    ctx_.for_rows(nf, kRowGrain,
                  [&](int64_t t) { rms_norm(xf + t * E, lw->ffn_norm.f32(), E, s_.norm_eps, b_.xn.data() + t * E); });
    if (s_.moe()) {
      DF_TRY(moe_ffn(*lw, il, nf));
    } else {
      dense_ffn(*lw, nf);
    }
    add(ctx_, xf, b_.proj.data(), nf * E, xf);
  }
  layer_pin_.release();
  kv.n_past += static_cast<uint32_t>(n);

  const int64_t first = all_logits ? 0 : n - 1, n_out = n - first;
  for (int64_t t = first; t < n; ++t)
    rms_norm(b_.x.data() + t * E, w_.output_norm.f32(), E, s_.norm_eps, b_.xn.data() + (t - first) * E);
  b_.logits.resize(uint64_t(n_out) * s_.n_vocab);
  matmul(w_.output, b_.xn.data(), n_out, b_.logits.data());
  stats_.tokens += uint64_t(n);
  return {};
}

void Forward::matmul(const model::Mat& w, const float* x, int64_t n, float* y) {
  const MatmulJob job{&w, x, n, y, one_row_};
  matmul_many(ctx_, std::span<const MatmulJob>(&job, 1));
}

void Forward::guess_experts(uint32_t next) {
  // The next block's norm and router applied to the current residual pick its experts well enough to start their
  // reads while this block's experts compute. Worth the router product only where experts stream.
  if (!s_.moe() || !w_.expert_tier || w_.expert_tier->resident() || w_.layers.empty()) return;
  cpu::guess_experts(*ctx_.kernels, s_, w_.layers[next].ffn_norm, w_.layers[next].gate_inp, b_.x.data(), guess_);
}

Status Forward::attention_block(const model::LayerWeights& lw, uint32_t il, int64_t n, KvCache& kv) {
  const int hv = int(s_.head_dim_v);
  const int64_t qd = s_.q_dim(), kd = s_.kv_dim_k(), vd = s_.kv_dim_v();
  ensure_size(b_.q, n * qd);
  ensure_size(b_.k, n * kd);
  ensure_size(b_.v, n * vd);
  ensure_size(b_.attn, n * int64_t(s_.n_head) * hv);
  const MatmulJob qkv[] = {{&lw.wq, b_.xn.data(), n, b_.q.data(), one_row_},
                           {&lw.wk, b_.xn.data(), n, b_.k.data(), one_row_},
                           {&lw.wv, b_.xn.data(), n, b_.v.data(), one_row_}};
  matmul_many(ctx_, qkv);
  ctx_.for_rows(n, kRowGrain, [&](int64_t t) { qk_norm(lw, b_.q.data() + t * qd, b_.k.data() + t * kd); });
  rope_cache_attend(ctx_, s_, kv, il, n, b_.q.data(), b_.k.data(), b_.v.data(), b_.attn.data());
  matmul(lw.wo, b_.attn.data(), n, b_.proj.data());
  return {};
}

void Forward::qk_norm(const model::LayerWeights& lw, float* q, float* k) const {
  if (!s_.qk_norm) return;
  const int hk = int(s_.head_dim_k);
  for (uint32_t h = 0; h < s_.n_head; ++h) rms_norm(q + h * hk, lw.q_norm.f32(), hk, s_.norm_eps, q + h * hk);
  for (uint32_t h = 0; h < s_.n_head_kv; ++h) rms_norm(k + h * hk, lw.k_norm.f32(), hk, s_.norm_eps, k + h * hk);
}

void Forward::dense_ffn(const model::LayerWeights& lw, int64_t n) {
  const int64_t F = s_.n_ff;
  ensure_size(b_.gate, n * F);
  ensure_size(b_.up, n * F);
  const MatmulJob gate_up[] = {{&lw.ffn_gate, b_.xn.data(), n, b_.gate.data(), one_row_},
                               {&lw.ffn_up, b_.xn.data(), n, b_.up.data(), one_row_}};
  matmul_many(ctx_, gate_up);
  swiglu(ctx_, b_.gate.data(), b_.up.data(), n * F, b_.gate.data());
  matmul(lw.ffn_down, b_.gate.data(), n, b_.proj.data());
}

Status Forward::moe_ffn(const model::LayerWeights& lw, uint32_t il, int64_t n) {
  DF_TRY(moe_.run(ctx_, {.router = &lw.gate_inp,
                         .tier = w_.expert_tier,
                         .layout = &w_.layouts->experts[il],
                         .layer = il,
                         .x = b_.xn.data(),
                         .n_tok = n,
                         .out = b_.proj.data(),
                         .one_row = one_row_,
                         .guess = guess_,
                         .routing = routing_}));
  stats_.expert_uses = moe_.expert_uses();
  return {};
}

}  // namespace df::cpu
