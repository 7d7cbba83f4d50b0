// Routing a batch to its experts: softmax, the top k as ggml's stable argsort orders them, the weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cpu/routed_experts.h"
#include "diskformer/backend/cpu/thread_pool.h"

namespace df::cpu {
namespace {

// The router's logits for n tokens over x experts, rounded to halves so that many of them tie.
std::vector<float> tied_logits(int64_t n, int64_t x, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> v(size_t(n * x));
  for (float& f : v) f = std::round(d(rng) * 2.0f) / 2.0f;
  return v;
}

TEST(Routing, TopKIsTheStableDescendingOrderOverThePool) {
  const int64_t n = 37, X = 64, K = 8;
  const std::vector<float> logits = tied_logits(n, X, 3);
  ThreadPool pool(3);
  Context ctx;
  ctx.pool = &pool;
  std::vector<float> probs = logits;
  Routing r;
  route_top_k(ctx, probs.data(), n, X, K, /*renormalize=*/true, r);
  ASSERT_EQ(r.sel.size(), size_t(n * K));
  std::vector<std::vector<std::pair<int64_t, int64_t>>> users(X);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> p(logits.begin() + t * X, logits.begin() + (t + 1) * X);
    softmax(p.data(), X);
    std::vector<int32_t> order(X);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double sum = 0.0;
    for (int64_t j = 0; j < K; ++j) sum += double(p[order[j]]);
    for (int64_t j = 0; j < K; ++j) {
      EXPECT_EQ(r.sel[t * K + j], order[j]) << "token " << t << " slot " << j;
      EXPECT_EQ(r.weight[t * K + j], p[order[j]] / float(sum));
      users[order[j]].push_back({t, j});
    }
  }
  EXPECT_EQ(r.users, users);  // each expert's (token, slot) pairs in token order
}

TEST(Routing, EqualProbabilitiesGoToTheLowerIdFirst) {
  std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f, 2.0f, 1.0f};
  Context ctx;
  Routing r;
  route_top_k(ctx, logits.data(), 1, 6, 4, /*renormalize=*/false, r);
  EXPECT_EQ(r.sel, (std::vector<int32_t>{1, 3, 4, 2}));
}

}  // namespace
}  // namespace df::cpu
