// The Gated DeltaNet operations against double-precision references, and the properties a sequence relies on: a
// batch leaves the state that its tokens one at a time leave, whatever the threads, and a snapshot inside a batch is
// the state after its prefix.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "diskformer/backend/cpu/delta_net.h"
#include "diskformer/backend/cpu/thread_pool.h"
#include "support/random.h"
#include "support/compare.h"

namespace df::cpu {
namespace {

using test::randn;

using test::same_bits;

TEST(DeltaNetOps, ElementwiseFunctionsAsGgml) {
  EXPECT_EQ(softplus(25.0f), 25.0f);  // passed through above 20
  EXPECT_EQ(softplus(1.5f), std::log(1.0f + std::exp(1.5f)));
  EXPECT_EQ(softplus(-30.0f), 0.0f);  // 1 + e^-30 is 1 in f32, as in ggml's
  EXPECT_EQ(sigmoid(0.0f), 0.5f);
  EXPECT_EQ(sigmoid(-2.0f), 1.0f / (1.0f + std::exp(2.0f)));
  std::vector<float> x = {3.0f, 4.0f}, y(2);
  l2_norm(x.data(), 2, 1e-6f, y.data());
  EXPECT_FLOAT_EQ(y[0], 0.6f);
  EXPECT_FLOAT_EQ(y[1], 0.8f);
  std::vector<float> zero = {0.0f, 0.0f};
  l2_norm(zero.data(), 2, 1e-6f, y.data());  // the norm is floored at eps: zeros stay zeros
  EXPECT_EQ(y[0], 0.0f);
}

TEST(DeltaNetOps, ConvolutionCarriesItsWindowAcrossBatches) {
  const int64_t C = 40, n = 7;
  const int K = 4;
  const auto x = randn(size_t(n * C), 1), w = randn(size_t(C * K), 2);
  Context ctx;
  std::vector<float> window(size_t((K - 1) * C), 0.0f), y(size_t(n * C));
  causal_conv1d(ctx, {.x = x.data(), .n_tok = n, .channels = C, .w = w.data(), .kernel = K, .window = window.data(),
                      .y = y.data()});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double want = 0;
      for (int i = 0; i < K; ++i) {
        const int64_t src = t - (K - 1) + i;  // zeros before the start
        if (src >= 0) want += double(w[size_t(c * K + i)]) * x[size_t(src * C + c)];
      }
      EXPECT_NEAR(y[size_t(t * C + c)], want, 1e-5) << t << " " << c;
    }
  // The window is the last K - 1 rows; one token at a time gives the same outputs bit for bit.
  for (int r = 0; r < K - 1; ++r)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(window[size_t(r * C + c)], x[size_t((n - (K - 1) + r) * C + c)]);
  std::vector<float> window1(size_t((K - 1) * C), 0.0f), y1(size_t(n * C));
  for (int64_t t = 0; t < n; ++t)
    causal_conv1d(ctx, {.x = x.data() + t * C, .n_tok = 1, .channels = C, .w = w.data(), .kernel = K,
                        .window = window1.data(), .y = y1.data() + t * C});
  EXPECT_TRUE(same_bits(y, y1));
  EXPECT_TRUE(same_bits(window, window1));
}

struct RuleInputs {
  int Hk = 2, Hv = 4, S = 32;
  int64_t n = 6;
  std::vector<float> qkv, g, beta;  // qkv: [n][2 Hk S + Hv S]
  int64_t stride() const { return int64_t(2 * Hk + Hv) * S; }
  explicit RuleInputs(uint64_t seed) {
    qkv = randn(size_t(n * stride()), seed);
    for (int64_t t = 0; t < n; ++t)
      for (int j = 0; j < 2 * Hk; ++j) {  // q and k heads L2-normalized, as the layer gives them
        float* h = qkv.data() + t * stride() + j * S;
        l2_norm(h, S, 1e-6f, h);
      }
    g = randn(size_t(n * Hv), seed + 1, 0.3f);
    for (auto& x : g) x = -std::fabs(x);
    beta = randn(size_t(n * Hv), seed + 2);
    for (auto& x : beta) x = sigmoid(x);
  }
  DeltaRuleArgs args(int64_t t0, int64_t count, float* state, float* out) const {
    return {.q = qkv.data() + t0 * stride(), .k = qkv.data() + t0 * stride() + Hk * S,
            .v = qkv.data() + t0 * stride() + 2 * Hk * S, .stride = stride(), .g = g.data() + t0 * Hv,
            .beta = beta.data() + t0 * Hv, .state = state, .out = out, .n_tok = count, .n_k_heads = Hk,
            .n_v_heads = Hv, .head_dim = S};
  }
};

TEST(DeltaNetOps, DeltaRuleMatchesItsDefinition) {
  const RuleInputs in(10);
  const int S = in.S, Hv = in.Hv;
  Context ctx;
  std::vector<float> state(size_t(Hv * S * S), 0.0f), out(size_t(in.n * Hv * S));
  gated_delta_rule(ctx, in.args(0, in.n, state.data(), out.data()));
  // The recurrence in double, with S[i][j] indexed plainly.
  std::vector<double> M(size_t(Hv * S * S), 0.0);
  for (int64_t t = 0; t < in.n; ++t)
    for (int h = 0; h < Hv; ++h) {
      const float* q = in.qkv.data() + t * in.stride() + (h % in.Hk) * S;
      const float* k = q + in.Hk * S;
      const float* v = in.qkv.data() + t * in.stride() + 2 * in.Hk * S + h * S;
      double* m = M.data() + size_t(h) * S * S;
      const double decay = std::exp(double(in.g[size_t(t * Hv + h)])), beta = in.beta[size_t(t * Hv + h)];
      for (int e = 0; e < S * S; ++e) m[e] *= decay;
      std::vector<double> d(static_cast<size_t>(S));
      for (int j = 0; j < S; ++j) {
        double kv = 0;
        for (int i = 0; i < S; ++i) kv += m[i * S + j] * k[i];
        d[size_t(j)] = (v[j] - kv) * beta;
      }
      for (int i = 0; i < S; ++i)
        for (int j = 0; j < S; ++j) m[i * S + j] += double(k[i]) * d[size_t(j)];
      for (int j = 0; j < S; ++j) {
        double o = 0;
        for (int i = 0; i < S; ++i) o += m[i * S + j] * q[i];
        EXPECT_NEAR(out[size_t((t * Hv + h) * S + j)], o / std::sqrt(double(S)), 1e-5) << t << " " << h << " " << j;
      }
    }
  for (int h = 0; h < Hv; ++h)  // stored transposed: [j][i] = S[i][j]
    for (int i = 0; i < S; ++i)
      for (int j = 0; j < S; ++j)
        EXPECT_NEAR(state[size_t((h * S + j) * S + i)], M[size_t((h * S + i) * S + j)], 1e-5);
}

TEST(DeltaNetOps, DeltaRuleIsTheSameBatchedOrOneTokenAtATimeOnAnyThreads) {
  const RuleInputs in(20);
  const size_t state_size = size_t(in.Hv * in.S * in.S);
  ThreadPool pool(3);
  Context one, many{.pool = &pool};
  std::vector<float> batched(state_size, 0.0f), out_b(size_t(in.n * in.Hv * in.S));
  std::vector<float> snapshot(state_size, -1.0f);
  DeltaRuleArgs a = in.args(0, in.n, batched.data(), out_b.data());
  a.save = snapshot.data();
  a.save_after = 2;
  gated_delta_rule(many, a);
  std::vector<float> single(state_size, 0.0f), out_s(out_b.size());
  for (int64_t t = 0; t < in.n; ++t) {
    gated_delta_rule(one, in.args(t, 1, single.data(), out_s.data() + t * in.Hv * in.S));
    if (t + 1 == 2) {
      EXPECT_TRUE(same_bits(single, snapshot)) << "the snapshot after two tokens";
    }
  }
  EXPECT_TRUE(same_bits(batched, single));
  EXPECT_TRUE(same_bits(out_b, out_s));
}

}  // namespace
}  // namespace df::cpu
