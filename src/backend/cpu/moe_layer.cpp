#include "diskformer/backend/cpu/moe_layer.h"

#include <algorithm>
#include <numeric>

namespace df::cpu {

namespace {
template <typename T>
void ensure(std::vector<T>& v, uint64_t n) {
  if (v.size() < n) v.resize(n);
}
}  // namespace

void guess_experts(const Kernels& k, const model::ModelSpec& s, const model::Mat& ffn_norm, const model::Mat& router,
                   const float* x, std::vector<int32_t>& out) {
  const int64_t E = s.n_embd, X = s.n_expert;
  std::vector<float> xn(E), p(X);
  rms_norm(x, ffn_norm.f32(), E, s.norm_eps, xn.data());
  Context one{.kernels = &k};
  matmul(one, router, xn.data(), 1, p.data());
  out.resize(X);
  std::iota(out.begin(), out.end(), 0);
  std::partial_sort(out.begin(), out.begin() + s.n_expert_used, out.end(),
                    [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  out.resize(s.n_expert_used);
}

Status MoeLayer::run(Context& ctx, const MoeLayerArgs& a) {
  const int64_t E = s_.n_embd, X = s_.n_expert, K = s_.n_expert_used, n = a.n_tok;
  ensure(router_, n * X);
  ensure(expert_out_, n * K * E);
  const MatmulJob route{a.router, a.x, n, router_.data(), a.one_row};
  matmul_many(ctx, std::span<const MatmulJob>(&route, 1));

  // Softmax over all experts, the top K by probability, weights renormalized over the K (their sum in double, as
  // ggml's sum_rows).
  std::vector<int32_t> sel(n * K);
  std::vector<float> wsel(n * K);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> users(X);  // expert -> (token, slot k)
  std::vector<int32_t> order(X);
  for (int64_t t = 0; t < n; ++t) {
    float* p = router_.data() + t * X;
    softmax(p, X);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return p[x] > p[y]; });
    double sum = 0.0;
    for (int64_t k = 0; k < K; ++k) sum += double(p[order[k]]);
    const float fsum = std::max(float(sum), 6.103515625e-5f);
    for (int64_t k = 0; k < K; ++k) {
      sel[t * K + k] = order[k];
      wsel[t * K + k] = s_.norm_topk ? p[order[k]] / fsum : p[order[k]];
      users[order[k]].push_back({t, k});
    }
  }
  expert_uses_ += uint64_t(n * K);
  if (a.routing) a.routing->record(a.layer, sel.data(), n);

  cache::RecordTier& tier = *a.tier;
  const uint32_t next = a.layer + 1;
  model::schedule_moe({.ids = sel, .n_tok = int32_t(n), .n_used = int32_t(K), .n_expert = int32_t(X),
                       .max_group = tier.max_acquire(),
                       .guess = a.guess,
                       .next_resident = [&](int32_t e) { return tier.contains(next, e); }},
                      schedule_);
  // Each group of experts is made resident at once; each expert runs once over the tokens routed to it and its
  // outputs land in the (token, slot) rows.
  std::vector<model::ExpertWeights> ew;
  std::vector<int64_t> first;
  for (size_t g = 0; g < schedule_.groups.size(); ++g) {
    const auto [g0, g1] = schedule_.groups[g];
    std::span<const int32_t> ids(schedule_.gpu.data() + g0, size_t(g1 - g0));
    DF_ASSIGN(cache::Pins pins, tier.acquire(a.layer, ids));
    // Reads ahead for the next layer start once this group's records are pinned, so they never take its slots.
    if (g == 0 && !schedule_.prefetch_compute.empty()) tier.prefetch(next, schedule_.prefetch_compute);
    ew.clear();
    first.assign(1, 0);
    for (size_t i = 0; i < ids.size(); ++i) {
      ew.push_back(model::expert_at(*a.layout, pins.data(i)));
      first.push_back(first.back() + int64_t(users[ids[i]].size()));
    }
    const int64_t m_all = first.back();
    ensure(gather_, m_all * E);
    ensure(down_, m_all * E);
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto& u = users[ids[i]];
      for (size_t j = 0; j < u.size(); ++j)
        std::copy_n(a.x + u[j].first * E, E, gather_.data() + (first[i] + int64_t(j)) * E);
    }
    expert_products(ctx, ew, first, gather_.data(), down_.data(), scratch_);
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto& u = users[ids[i]];
      for (size_t j = 0; j < u.size(); ++j)
        std::copy_n(down_.data() + (first[i] + int64_t(j)) * E, E,
                    expert_out_.data() + (u[j].first * K + u[j].second) * E);
    }
  }
  // Weighted sum in routing order, as llama.cpp adds the experts' views one after another.
  for (int64_t t = 0; t < n; ++t) {
    float* out = a.out + t * E;
    for (int64_t k = 0; k < K; ++k) {
      const float* eo = expert_out_.data() + (t * K + k) * E;
      const float w = wsel[t * K + k];
      for (int64_t i = 0; i < E; ++i) out[i] = k == 0 ? eo[i] * w : out[i] + eo[i] * w;
    }
  }
  return {};
}

}  // namespace df::cpu
