#include "diskformer/model/forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "diskformer/util/check.h"

namespace df::model {

namespace {
template <typename T>
void ensure(std::vector<T>& v, uint64_t n) {
  if (v.size() < n) v.resize(n);
}
}  // namespace

Status Forward::run(std::span<const int32_t> tokens, KvCache& kv, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t E = s_.n_embd;
  if (n == 0) return Error{"forward: empty batch"};
  if (kv.n_past + n > kv.n_ctx)
    return Error{"context overflow: " + std::to_string(kv.n_past) + " positions used + " + std::to_string(n) +
                 " new tokens exceed the context size " + std::to_string(kv.n_ctx) + " (-c)"};
  for (int64_t t = 0; t < n; ++t)
    if (tokens[t] < 0 || uint32_t(tokens[t]) >= s_.n_vocab)
      return Error{"token id " + std::to_string(tokens[t]) + " at batch position " + std::to_string(t) +
                   " is outside the vocabulary of " + std::to_string(s_.n_vocab)};

  one_row_ = n >= kTiledAttentionRows;
  ensure(b_.x, n * E);
  ensure(b_.xn, n * E);
  ensure(b_.proj, n * E);
  for (int64_t t = 0; t < n; ++t) cpu::get_row(w_.token_embd(), tokens[t], b_.x.data() + t * E);

  for (uint32_t il = 0; il < s_.n_layer; ++il) {
    DF_ASSIGN(const LayerWeights* lw, w_.layer(il));
    // Attention sublayer with a residual connection.
    for (int64_t t = 0; t < n; ++t)
      cpu::rms_norm(b_.x.data() + t * E, lw->attn_norm.f32(), E, s_.norm_eps, b_.xn.data() + t * E);
    DF_TRY(attention_block(*lw, il, n, kv));
    for (int64_t i = 0; i < n * E; ++i) b_.x[i] += b_.proj[i];
    if (n == 1 && il + 1 < s_.n_layer) guess_next_experts(il + 1);
    // Feed-forward sublayer with a residual connection. As llama.cpp does, the last block feeds forward only the
    // rows whose logits are asked for (its products then take their one-row orders); routing statistics want
    // every token's route.
    const int64_t f0 = il + 1 == s_.n_layer && !all_logits && !routing_ ? n - 1 : 0, nf = n - f0;
    float* xf = b_.x.data() + f0 * E;
    for (int64_t t = 0; t < nf; ++t)
      cpu::rms_norm(xf + t * E, lw->ffn_norm.f32(), E, s_.norm_eps, b_.xn.data() + t * E);
    if (s_.moe()) {
      DF_TRY(moe_ffn(*lw, il, nf));
    } else {
      dense_ffn(*lw, nf);
    }
    for (int64_t i = 0; i < nf * E; ++i) xf[i] += b_.proj[i];
  }
  kv.n_past += static_cast<uint32_t>(n);

  const int64_t first = all_logits ? 0 : n - 1, n_out = n - first;
  for (int64_t t = first; t < n; ++t)
    cpu::rms_norm(b_.x.data() + t * E, w_.output_norm().f32(), E, s_.norm_eps, b_.xn.data() + (t - first) * E);
  b_.logits.resize(uint64_t(n_out) * s_.n_vocab);
  matmul(w_.output(), b_.xn.data(), n_out, b_.logits.data());
  stats_.tokens += uint64_t(n);
  return {};
}

void Forward::matmul(const Mat& w, const float* x, int64_t n, float* y) {
  const cpu::MatmulJob job{&w, x, n, y, one_row_};
  cpu::matmul_many(ctx_, std::span<const cpu::MatmulJob>(&job, 1));
}

void Forward::guess_next_experts(uint32_t next) {
  // The next block's norm and router applied to the current residual pick its experts well enough to start their
  // reads while this block's experts compute.
  if (!s_.moe() || !w_.wants_expert_guesses()) return;
  const LayerWeights* lw = w_.resident_layer(next);
  if (!lw) return;
  const int64_t E = s_.n_embd, X = s_.n_expert;
  std::vector<float> xn(E), p(X);
  cpu::rms_norm(b_.x.data(), lw->ffn_norm.f32(), E, s_.norm_eps, xn.data());
  cpu::Context one{.kernels = ctx_.kernels};
  cpu::matmul(one, lw->gate_inp, xn.data(), 1, p.data());
  std::vector<int32_t> order(X);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + s_.n_expert_used, order.end(),
                    [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  order.resize(s_.n_expert_used);
  w_.prefetch_experts(next, order);
}

Status Forward::attention_block(const LayerWeights& lw, uint32_t il, int64_t n, KvCache& kv) {
  const int hk = int(s_.head_dim_k), hv = int(s_.head_dim_v);
  const int64_t qd = s_.q_dim(), kd = s_.kv_dim_k(), vd = s_.kv_dim_v();
  ensure(b_.q, n * qd);
  ensure(b_.k, n * kd);
  ensure(b_.v, n * vd);
  ensure(b_.attn, n * int64_t(s_.n_head) * hv);
  const cpu::MatmulJob qkv[] = {{&lw.wq, b_.xn.data(), n, b_.q.data(), one_row_},
                                {&lw.wk, b_.xn.data(), n, b_.k.data(), one_row_},
                                {&lw.wv, b_.xn.data(), n, b_.v.data(), one_row_}};
  cpu::matmul_many(ctx_, qkv);
  for (int64_t t = 0; t < n; ++t) {
    float* q = b_.q.data() + t * qd;
    float* k = b_.k.data() + t * kd;
    if (s_.qk_norm) {
      for (uint32_t h = 0; h < s_.n_head; ++h) cpu::rms_norm(q + h * hk, lw.q_norm.f32(), hk, s_.norm_eps, q + h * hk);
      for (uint32_t h = 0; h < s_.n_head_kv; ++h)
        cpu::rms_norm(k + h * hk, lw.k_norm.f32(), hk, s_.norm_eps, k + h * hk);
    }
    const int64_t pos = kv.n_past + t;
    cpu::rope(q, int(s_.n_head), hk, int(s_.n_rot), pos, s_.rope_base, s_.rope_style);
    cpu::rope(k, int(s_.n_head_kv), hk, int(s_.n_rot), pos, s_.rope_base, s_.rope_style);
    ctx_.kernels->to_f16(k, kv.k_at(il, uint32_t(pos)), kd);
    ctx_.kernels->to_f16(b_.v.data() + t * vd, kv.v_at(il, uint32_t(pos)), vd);
  }
  cpu::attention(ctx_, {.q = b_.q.data(),
                        .k = kv.k_at(il, 0),
                        .v = kv.v_at(il, 0),
                        .out = b_.attn.data(),
                        .n_head = int(s_.n_head),
                        .n_head_kv = int(s_.n_head_kv),
                        .head_dim_k = hk,
                        .head_dim_v = hv,
                        .pos0 = kv.n_past,
                        .n_tok = n,
                        .scale = 1.0f / std::sqrt(float(hk))});
  matmul(lw.wo, b_.attn.data(), n, b_.proj.data());
  return {};
}

void Forward::dense_ffn(const LayerWeights& lw, int64_t n) {
  const int64_t F = s_.n_ff;
  ensure(b_.gate, n * F);
  ensure(b_.up, n * F);
  const cpu::MatmulJob gate_up[] = {{&lw.ffn_gate, b_.xn.data(), n, b_.gate.data(), one_row_},
                                    {&lw.ffn_up, b_.xn.data(), n, b_.up.data(), one_row_}};
  cpu::matmul_many(ctx_, gate_up);
  cpu::swiglu(b_.gate.data(), b_.up.data(), n * F, b_.gate.data());
  matmul(lw.ffn_down, b_.gate.data(), n, b_.proj.data());
}

Status Forward::moe_ffn(const LayerWeights& lw, uint32_t il, int64_t n) {
  const int64_t E = s_.n_embd, F = s_.n_ff_expert, X = s_.n_expert, K = s_.n_expert_used;
  ensure(b_.router, n * X);
  ensure(b_.expert_out, n * K * E);
  matmul(lw.gate_inp, b_.xn.data(), n, b_.router.data());

  // Routing: softmax over all experts, the top K by probability, weights renormalized over the K.
  std::vector<int32_t> sel(n * K);
  std::vector<float> wsel(n * K);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> users(X);  // expert -> (token, slot k)
  for (int64_t t = 0; t < n; ++t) {
    float* p = b_.router.data() + t * X;
    cpu::softmax(p, X);
    std::vector<int32_t> order(X);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double sum = 0.0;
    for (int64_t k = 0; k < K; ++k) sum += double(p[order[k]]);
    const float fsum = std::max(float(sum), 6.103515625e-5f);
    for (int64_t k = 0; k < K; ++k) {
      sel[t * K + k] = order[k];
      wsel[t * K + k] = s_.norm_topk ? p[order[k]] / fsum : p[order[k]];
      users[order[k]].push_back({t, k});
    }
  }
  std::vector<int32_t> used;
  for (int32_t e = 0; e < X; ++e)
    if (!users[e].empty()) used.push_back(e);
  stats_.expert_uses += uint64_t(n * K);
  if (routing_) routing_->record(il, sel.data(), n);

  // Each expert runs once over the tokens routed to it; its outputs land in the (token, slot) rows. The gate and
  // up products of all experts of a request are one parallel job, their down products another.
  const size_t per_call = w_.max_experts_per_call() ? w_.max_experts_per_call() : used.size();
  for (size_t c0 = 0; c0 < used.size(); c0 += per_call) {
    std::span<const int32_t> ids(used.data() + c0, std::min(per_call, used.size() - c0));
    DF_ASSIGN(std::vector<ExpertWeights> ew, w_.experts(il, ids));
    // Row offsets of each expert's tokens in the gathered buffers.
    std::vector<int64_t> first(ids.size() + 1, 0);
    for (size_t i = 0; i < ids.size(); ++i) first[i + 1] = first[i] + int64_t(users[ids[i]].size());
    const int64_t m_all = first.back();
    ensure(b_.gather, m_all * E);
    ensure(b_.gate, m_all * F);
    ensure(b_.up, m_all * F);
    ensure(b_.down, m_all * E);
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto& u = users[ids[i]];
      for (size_t j = 0; j < u.size(); ++j)
        std::copy_n(b_.xn.data() + u[j].first * E, E, b_.gather.data() + (first[i] + int64_t(j)) * E);
    }
    std::vector<cpu::MatmulJob> jobs;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t m = first[i + 1] - first[i];
      jobs.push_back({&ew[i].gate, b_.gather.data() + first[i] * E, m, b_.gate.data() + first[i] * F, true});
      jobs.push_back({&ew[i].up, b_.gather.data() + first[i] * E, m, b_.up.data() + first[i] * F, true});
    }
    cpu::matmul_many(ctx_, jobs);
    cpu::swiglu(b_.gate.data(), b_.up.data(), m_all * F, b_.gate.data());
    jobs.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t m = first[i + 1] - first[i];
      jobs.push_back({&ew[i].down, b_.gate.data() + first[i] * F, m, b_.down.data() + first[i] * E, true});
    }
    cpu::matmul_many(ctx_, jobs);
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto& u = users[ids[i]];
      for (size_t j = 0; j < u.size(); ++j)
        std::copy_n(b_.down.data() + (first[i] + int64_t(j)) * E, E,
                    b_.expert_out.data() + (u[j].first * K + u[j].second) * E);
    }
  }
  // Weighted sum in routing order, as llama.cpp adds the experts' views one after another.
  for (int64_t t = 0; t < n; ++t) {
    float* out = b_.proj.data() + t * E;
    for (int64_t k = 0; k < K; ++k) {
      const float* eo = b_.expert_out.data() + (t * K + k) * E;
      const float w = wsel[t * K + k];
      for (int64_t i = 0; i < E; ++i) out[i] = k == 0 ? eo[i] * w : out[i] + eo[i] * w;
    }
  }
  return {};
}

}  // namespace df::model
