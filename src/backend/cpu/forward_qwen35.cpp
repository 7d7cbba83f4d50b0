#include "diskformer/backend/cpu/forward_qwen35.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "diskformer/backend/cpu/delta_net.h"
#include "diskformer/util/check.h"

namespace df::cpu {

HybridForward::HybridForward(const model::ModelSpec& spec, const ForwardWeights& weights, Context& ctx)
    : s_(spec), w_(weights), ctx_(ctx), moe_(spec) {
  DF_CHECK(w_.layers.size() == s_.n_layer && w_.expert_tier != nullptr);
  uint32_t recurrent = 0;
  for (uint32_t il = 0; il < s_.n_layer; ++il) slot_.push_back(s_.is_recurrent(il) ? recurrent++ : 0);
}

Status HybridForward::run(std::span<const int32_t> tokens, KvCache& kv, RecurrentState& state, const Options& o) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t E = s_.n_embd;
  DF_TRY(check_batch(s_, tokens, kv));
  DF_CHECK(state.n_past == kv.n_past);
  DF_CHECK(!o.save || (o.save_after > 0 && o.save_after < n));
  if (o.save) {
    DF_CHECK(o.save->conv.size() == state.conv.size() && o.save->ssm.size() == state.ssm.size());
    o.save->n_past = state.n_past + uint32_t(o.save_after);
  }

  ensure_size(b_.x, n * E);
  ensure_size(b_.xn, n * E);
  ensure_size(b_.proj, n * E);
  DF_TRY(gather_rows(w_.token_embd, w_.token_rows, tokens, b_.x.data()));

  for (uint32_t il = 0; il < s_.n_layer; ++il) {
    const model::LayerWeights& lw = w_.layers[il];
    ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
      rms_norm(b_.x.data() + t * E, lw.attn_norm.f32(), E, s_.norm_eps, b_.xn.data() + t * E);
    });
    if (s_.is_recurrent(il)) {
      delta_net(lw, slot_[il], n, state, o);
    } else {
      attention_block(lw, il, n, kv);
    }
    add(ctx_, b_.x.data(), b_.proj.data(), n * E, b_.x.data());
    guess_.clear();
    if (n == 1 && il + 1 < s_.n_layer) guess_experts(il + 1);
    // Unlike qwen3moe's, llama.cpp's qwen35moe graph feeds forward every row of the last block, not only those
    // whose logits are asked for: the products keep the batch's orders.
    ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
      rms_norm(b_.x.data() + t * E, lw.ffn_norm.f32(), E, s_.norm_eps, b_.xn.data() + t * E);
    });
    DF_TRY(ffn(lw, il, n));
    add(ctx_, b_.x.data(), b_.proj.data(), n * E, b_.x.data());
  }
  kv.n_past += static_cast<uint32_t>(n);
  state.n_past += static_cast<uint32_t>(n);

  const int64_t first = o.all_logits ? 0 : n - 1, n_out = n - first;
  for (int64_t t = first; t < n; ++t)
    rms_norm(b_.x.data() + t * E, w_.output_norm.f32(), E, s_.norm_eps, b_.xn.data() + (t - first) * E);
  b_.logits.resize(uint64_t(n_out) * s_.n_vocab);
  matmul(w_.output, b_.xn.data(), n_out, b_.logits.data());
  stats_.tokens += uint64_t(n);
  stats_.expert_uses = moe_.expert_uses();
  return {};
}

void HybridForward::matmul(const model::Mat& w, const float* x, int64_t n, float* y) {
  const MatmulJob job{&w, x, n, y};
  matmul_many(ctx_, std::span<const MatmulJob>(&job, 1));
}

void HybridForward::guess_experts(uint32_t next) {
  // Worth the router product only where experts stream.
  if (w_.expert_tier->resident()) return;
  cpu::guess_experts(*ctx_.kernels, s_, w_.layers[next].ffn_norm, w_.layers[next].gate_inp, b_.x.data(), guess_);
}

void HybridForward::delta_net(const model::LayerWeights& lw, uint32_t slot, int64_t n, RecurrentState& state,
                              const Options& o) {
  const model::DeltaNetSpec& d = s_.delta_net;
  const int64_t C = d.conv_dim(), Kd = d.k_dim(), Vd = d.v_dim(), Hv = d.n_v_heads, S = d.head_dim;
  ensure_size(b_.mixed, n * C);
  ensure_size(b_.conv, n * C);
  ensure_size(b_.z, n * Vd);
  ensure_size(b_.beta, n * Hv);
  ensure_size(b_.g, n * Hv);
  ensure_size(b_.core, n * Vd);
  const MatmulJob proj[] = {{&lw.ssm_qkv, b_.xn.data(), n, b_.mixed.data()},
                            {&lw.ssm_z, b_.xn.data(), n, b_.z.data()},
                            {&lw.ssm_beta, b_.xn.data(), n, b_.beta.data()},
                            {&lw.ssm_alpha, b_.xn.data(), n, b_.g.data()}};
  matmul_many(ctx_, proj);
  // Per v head: the update rate and the log of the decay (ggml's add, softplus and mul, each rounded).
  const float* dt_bias = lw.ssm_dt_bias.f32();
  const float* a_scale = lw.ssm_a.f32();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < Hv; ++h) {
      float& beta = b_.beta[t * Hv + h];
      beta = sigmoid(beta);
      float& g = b_.g[t * Hv + h];
      g = softplus(g + dt_bias[h]) * a_scale[h];
    }
  if (o.save) {
    // The convolution's window after save_after tokens: rows save_after .. save_after + K - 2 of the old window
    // followed by the batch.
    const int64_t W = d.conv_kernel - 1;
    float* to = o.save->conv_at(slot);
    const float* from = state.conv_at(slot);
    for (int64_t r = 0; r < W; ++r) {
      const int64_t src = o.save_after + r;
      std::copy_n(src < W ? from + src * C : b_.mixed.data() + (src - W) * C, C, to + r * C);
    }
  }
  causal_conv1d(ctx_, {.x = b_.mixed.data(), .n_tok = n, .channels = C, .w = lw.ssm_conv.f32(),
                       .kernel = int(d.conv_kernel), .window = state.conv_at(slot), .y = b_.conv.data()});
  ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
    float* c = b_.conv.data() + t * C;
    silu(*ctx_.kernels, c, C, c);
    for (int64_t j = 0; j < 2 * int64_t(d.n_k_heads); ++j) l2_norm(c + j * S, S, s_.norm_eps, c + j * S);
  });
  gated_delta_rule(ctx_, {.q = b_.conv.data(), .k = b_.conv.data() + Kd, .v = b_.conv.data() + 2 * Kd, .stride = C,
                          .g = b_.g.data(), .beta = b_.beta.data(), .state = state.ssm_at(slot),
                          .out = b_.core.data(), .n_tok = n, .n_k_heads = int(d.n_k_heads), .n_v_heads = int(Hv),
                          .head_dim = int(S),
                          .save = o.save ? o.save->ssm_at(slot) : nullptr,
                          .save_after = o.save_after});
  // The gated norm per v head: rmsnorm(out) * ssm_norm * silu(z).
  ctx_.for_rows(n * Hv, kRowGrain * Hv, [&](int64_t r) {
    float* o = b_.core.data() + r * S;
    float* z = b_.z.data() + r * S;
    rms_norm(o, lw.ssm_norm.f32(), S, s_.norm_eps, o);
    silu(*ctx_.kernels, z, S, z);
    for (int64_t i = 0; i < S; ++i) o[i] *= z[i];
  });
  matmul(lw.ssm_out, b_.core.data(), n, b_.proj.data());
}

void HybridForward::attention_block(const model::LayerWeights& lw, uint32_t il, int64_t n, KvCache& kv) {
  const int64_t D = s_.head_dim_k, H = s_.n_head, qd = s_.q_dim(), kd = s_.kv_dim_k(), vd = s_.kv_dim_v();
  ensure_size(b_.q_gate, n * 2 * qd);
  ensure_size(b_.q, n * qd);
  ensure_size(b_.gate, n * qd);
  ensure_size(b_.k, n * kd);
  ensure_size(b_.v, n * vd);
  ensure_size(b_.attn, n * qd);
  const MatmulJob qkv[] = {{&lw.wq, b_.xn.data(), n, b_.q_gate.data()},
                           {&lw.wk, b_.xn.data(), n, b_.k.data()},
                           {&lw.wv, b_.xn.data(), n, b_.v.data()}};
  matmul_many(ctx_, qkv);
  ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
    float* q = b_.q.data() + t * qd;
    float* k = b_.k.data() + t * kd;
    for (int64_t h = 0; h < H; ++h) {
      const float* qg = b_.q_gate.data() + (t * H + h) * 2 * D;
      rms_norm(qg, lw.q_norm.f32(), D, s_.norm_eps, q + h * D);
      std::copy_n(qg + D, D, b_.gate.data() + t * qd + h * D);
    }
    for (uint32_t h = 0; h < s_.n_head_kv; ++h) rms_norm(k + h * D, lw.k_norm.f32(), D, s_.norm_eps, k + h * D);
  });
  rope_cache_attend(ctx_, s_, kv, il, n, b_.q.data(), b_.k.data(), b_.v.data(), b_.attn.data());
  for (int64_t i = 0; i < n * qd; ++i) b_.attn[i] *= sigmoid(b_.gate[i]);
  matmul(lw.wo, b_.attn.data(), n, b_.proj.data());
}

Status HybridForward::ffn(const model::LayerWeights& lw, uint32_t il, int64_t n) {
  const int64_t E = s_.n_embd, Fs = s_.n_ff_shared;
  DF_TRY(moe_.run(ctx_, {.router = &lw.gate_inp,
                         .tier = w_.expert_tier,
                         .layout = &w_.layouts->experts[il],
                         .layer = il,
                         .x = b_.xn.data(),
                         .n_tok = n,
                         .out = b_.proj.data(),
                         .guess = guess_,
                         .routing = routing_}));
  // The shared expert, scaled by the sigmoid of its gate's one logit per token, added to the routed experts' sum.
  ensure_size(b_.sh_gate, n * Fs);
  ensure_size(b_.sh_up, n * Fs);
  ensure_size(b_.sh_logit, n);
  ensure_size(b_.sh_out, n * E);
  const MatmulJob gate_up[] = {{&lw.gate_shexp, b_.xn.data(), n, b_.sh_gate.data()},
                               {&lw.up_shexp, b_.xn.data(), n, b_.sh_up.data()},
                               {&lw.gate_inp_shexp, b_.xn.data(), n, b_.sh_logit.data()}};
  matmul_many(ctx_, gate_up);
  ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
    swiglu(b_.sh_gate.data() + t * Fs, b_.sh_up.data() + t * Fs, Fs, b_.sh_gate.data() + t * Fs);
  });
  matmul(lw.down_shexp, b_.sh_gate.data(), n, b_.sh_out.data());
  ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
    const float scale = sigmoid(b_.sh_logit[t]);
    float* out = b_.proj.data() + t * E;
    const float* sh = b_.sh_out.data() + t * E;
    for (int64_t i = 0; i < E; ++i) out[i] += sh[i] * scale;
  });
  return {};
}

}  // namespace df::cpu
