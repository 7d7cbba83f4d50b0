#include "diskformer/backend/cpu/routed_experts.h"

#include <algorithm>
#include <functional>
#include <numeric>

namespace df::cpu {

void route_top_k(Context& ctx, float* probs, int64_t n_tok, int64_t n_expert, int64_t k, bool renormalize,
                 Routing& out) {
  out.sel.resize(size_t(n_tok * k));
  out.weight.resize(size_t(n_tok * k));
  ctx.for_ranges(n_tok, 1, kRowGrain, [&](int64_t t0, int64_t t1) {
    std::vector<int32_t> order(static_cast<size_t>(n_expert));
    for (int64_t t = t0; t < t1; ++t) {
      float* p = probs + t * n_expert;
      softmax(p, n_expert);
      // The k first of a stable descending sort: ties broken by the lower id.
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
      double sum = 0.0;
      for (int64_t j = 0; j < k; ++j) sum += double(p[order[j]]);
      const float fsum = std::max(float(sum), 6.103515625e-5f);
      for (int64_t j = 0; j < k; ++j) {
        out.sel[t * k + j] = order[j];
        out.weight[t * k + j] = renormalize ? p[order[j]] / fsum : p[order[j]];
      }
    }
  });
  out.users.assign(size_t(n_expert), {});
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t j = 0; j < k; ++j) out.users[out.sel[t * k + j]].push_back({t, j});
}

void top_k_ids(const float* scores, int64_t n, int64_t k, std::vector<int32_t>& out) {
  out.resize(size_t(n));
  std::iota(out.begin(), out.end(), 0);
  std::partial_sort(out.begin(), out.begin() + k, out.end(), [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  out.resize(size_t(k));
}

Status routed_expert_rows(Context& ctx, const RoutedLayer& l, const Routing& r, int64_t n_tok, const float* in,
                          float* out, RoutedScratch& sc) {
  const int64_t E = l.n_embd, K = int64_t(r.sel.size()) / n_tok;
  cache::RecordTier& tier = *l.tier;
  const uint32_t next = l.layer + 1;
  model::schedule_moe({.ids = r.sel, .n_tok = int32_t(n_tok), .n_used = int32_t(K), .n_expert = int32_t(l.n_expert),
                       .max_group = tier.max_acquire(),
                       .guess = l.guess,
                       .next_resident = [&](int32_t e) { return tier.contains(next, e); }},
                      sc.schedule);
  // Each group of experts is made resident at once; each expert runs once over the tokens routed to it and its
  // outputs land in the (token, slot) rows.
  std::vector<model::ExpertWeights> ew;
  std::vector<int64_t> first;
  for (size_t g = 0; g < sc.schedule.groups.size(); ++g) {
    const auto [g0, g1] = sc.schedule.groups[g];
    std::span<const int32_t> ids(sc.schedule.gpu.data() + g0, size_t(g1 - g0));
    DF_ASSIGN(cache::Pins pins, tier.acquire(l.layer, ids));
    if (g == 0 && !sc.schedule.prefetch_compute.empty()) tier.prefetch(next, sc.schedule.prefetch_compute);
    ew.clear();
    first.assign(1, 0);
    for (size_t i = 0; i < ids.size(); ++i) {
      ew.push_back(model::expert_at(*l.layout, pins.data(i)));
      first.push_back(first.back() + int64_t(r.users[ids[i]].size()));
    }
    const uint64_t rows = uint64_t(first.back());
    // One token's experts (decode) all read its row where it is; a batch's are gathered by expert.
    const bool one_token = n_tok == 1;
    if (!one_token) sc.gather.grow(rows * E);
    sc.down.grow(rows * E);
    // The copies in and out are tens of MB for a prefill batch: one expert per task (decode's few rows stay on
    // this thread rather than wake the pool).
    auto per_expert = [&](const std::function<void(int64_t)>& fn) {
      if (rows > 64) {
        ctx.parallel(int64_t(ids.size()), fn);
      } else {
        for (int64_t i = 0; i < int64_t(ids.size()); ++i) fn(i);
      }
    };
    if (!one_token)
      per_expert([&](int64_t i) {
        const auto& u = r.users[ids[size_t(i)]];
        for (size_t j = 0; j < u.size(); ++j)
          std::copy_n(in + u[j].first * E, E, sc.gather.data() + (first[size_t(i)] + int64_t(j)) * E);
      });
    expert_products(ctx, ew, first, one_token ? in : sc.gather.data(), sc.down.data(), sc.experts, l.act, one_token);
    per_expert([&](int64_t i) {
      const auto& u = r.users[ids[size_t(i)]];
      for (size_t j = 0; j < u.size(); ++j)
        std::copy_n(sc.down.data() + (first[size_t(i)] + int64_t(j)) * E, E, out + (u[j].first * K + u[j].second) * E);
    });
  }
  return {};
}

}  // namespace df::cpu
