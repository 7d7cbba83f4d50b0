// The Gated DeltaNet kernels against the CPU's (backend/cpu/delta_net.h) on random data, for a decode step and for a
// batch with a copy of the state inside it: the convolution's window and copy bit for bit (copies of inputs), its
// outputs within the SiLU's rounding (the CPU's SIMD SiLU, the GPU's expf); the L2 norm within a few ulps; the delta
// rule's outputs and state within the f32 summation order of its 128-term dot products, over every token, token by
// token and in chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "diskformer/backend/cpu/delta_net.h"
#include "gpu/gpu_support.h"
#include "gpu/kernel_support.h"

namespace df::test {
namespace {

cuda::DeviceBuffer upload_floats(const std::vector<float>& v) {
  cuda::DeviceBuffer b(std::max<size_t>(v.size(), 1) * 4);
  b.upload(v.data(), v.size() * 4);
  return b;
}

// max |got - want| / (max |want| + floor) over the elements: one number per comparison.
double rel_diff(const std::vector<float>& got, const std::vector<float>& want, double floor = 1e-3) {
  EXPECT_EQ(got.size(), want.size());
  double d = 0, mag = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    d = std::max(d, std::fabs(double(got[i]) - double(want[i])));
    mag = std::max(mag, std::fabs(double(want[i])));
  }
  return d / (mag + floor);
}

class CudaDeltaNet : public ::testing::TestWithParam<int64_t> {};  // tokens per batch

TEST_P(CudaDeltaNet, ConvolutionMatchesTheCpu) {
  DF_REQUIRE_GPU();
  const int64_t n = GetParam(), C = 1536 + 32, K = 4, W = K - 1;
  const int64_t save_after = n > 1 ? (n + 1) / 2 : 0;  // inside the batch: 0 < save_after < n
  const auto x = random_floats(n * C, 11, -2.0f, 2.0f);
  const auto w = random_floats(C * K, 12);
  const auto window0 = random_floats(W * C, 13, -2.0f, 2.0f);

  std::vector<float> want(n * C), window = window0, want_save(W * C);
  // The CPU forward's copy of the window after save_after tokens: rows save_after .. of the window and the batch.
  for (int64_t r = 0; r < W && save_after; ++r) {
    const int64_t src = save_after + r;
    std::copy_n(src < W ? window0.data() + src * C : x.data() + (src - W) * C, C, want_save.data() + r * C);
  }
  cpu::Context ctx;
  cpu::causal_conv1d(ctx, {.x = x.data(), .n_tok = n, .channels = C, .w = w.data(), .kernel = int(K),
                           .window = window.data(), .y = want.data()});
  for (int64_t t = 0; t < n; ++t) cpu::silu(*ctx.kernels, want.data() + t * C, C, want.data() + t * C);

  auto dx = upload_floats(x), dw = upload_floats(w), dwin = upload_floats(window0);
  cuda::DeviceBuffer dy(n * C * 4), dsave(W * C * 4);
  cuda::causal_conv1d_silu({.x = dx.as<float>(), .n_tok = n, .channels = C, .w = dw.as<float>(), .kernel = int(K),
                            .window = dwin.as<float>(), .y = dy.as<float>(),
                            .save = save_after ? dsave.as<float>() : nullptr, .save_after = save_after});
  const auto got = download<float>(dy, n * C);
  EXPECT_EQ(download<float>(dwin, W * C), window);
  if (save_after) {
    EXPECT_EQ(download<float>(dsave, W * C), want_save);
  }
  const double d = rel_diff(got, want);
  std::printf("[delta-net conv] n %lld: max rel diff %.3g\n", (long long)n, d);
  EXPECT_LE(d, 1e-5);
}

TEST_P(CudaDeltaNet, L2NormMatchesTheCpu) {
  DF_REQUIRE_GPU();
  const int64_t n = GetParam(), S = 128, heads = 4, stride = 6 * S;
  auto x = random_floats(n * stride, 21, -3.0f, 3.0f);
  std::vector<float> want = x;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      float* p = want.data() + t * stride + h * S;
      cpu::l2_norm(p, S, 1e-6f, p);
    }
  auto dx = upload_floats(x);
  cuda::l2_norm_heads({.x = dx.as<float>(), .n_tok = n, .stride = stride, .n_heads = int(heads), .head_dim = int(S),
                       .eps = 1e-6f});
  const auto got = download<float>(dx, x.size());
  // The channels after the q/k heads are untouched.
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = heads * S; i < stride; ++i) ASSERT_EQ(got[t * stride + i], x[t * stride + i]);
  const double d = rel_diff(got, want);
  std::printf("[delta-net l2] n %lld: max rel diff %.3g\n", (long long)n, d);
  EXPECT_LE(d, 1e-6);
}

TEST_P(CudaDeltaNet, GatedDeltaRuleMatchesTheCpu) {
  DF_REQUIRE_GPU();
  const int64_t n = GetParam(), S = 128, Hk = 2, Hv = 4, stride = (2 * Hk + Hv) * S;
  const int64_t save_after = n > 1 ? (n + 1) / 2 : 0;  // inside the batch: 0 < save_after < n
  // q and k L2-normalized per head, as the convolution leaves them; v, the gates' inputs and a prior state random.
  auto conv = random_floats(n * stride, 31);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < 2 * Hk; ++h) {
      float* p = conv.data() + t * stride + h * S;
      cpu::l2_norm(p, S, 1e-6f, p);
    }
  const auto alpha = random_floats(n * Hv, 32, -4.0f, 4.0f);
  const auto beta_in = random_floats(n * Hv, 33, -4.0f, 4.0f);
  const auto dt_bias = random_floats(Hv, 34);
  const auto a_scale = random_floats(Hv, 35, -2.0f, -0.05f);  // ssm_a = -exp(A_log) < 0
  const auto state0 = random_floats(Hv * S * S, 36, -0.5f, 0.5f);

  // The CPU forward's gates, then its delta rule.
  std::vector<float> g(n * Hv), beta(n * Hv);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < Hv; ++h) {
      beta[t * Hv + h] = cpu::sigmoid(beta_in[t * Hv + h]);
      g[t * Hv + h] = cpu::softplus(alpha[t * Hv + h] + dt_bias[h]) * a_scale[h];
    }
  std::vector<float> want(n * Hv * S), state = state0, want_save(Hv * S * S);
  cpu::Context ctx;
  cpu::gated_delta_rule(ctx, {.q = conv.data(), .k = conv.data() + Hk * S, .v = conv.data() + 2 * Hk * S,
                              .stride = stride, .g = g.data(), .beta = beta.data(), .state = state.data(),
                              .out = want.data(), .n_tok = n, .n_k_heads = int(Hk), .n_v_heads = int(Hv),
                              .head_dim = int(S), .save = save_after ? want_save.data() : nullptr,
                              .save_after = save_after});

  auto dconv = upload_floats(conv), dalpha = upload_floats(alpha), dbeta = upload_floats(beta_in);
  auto dbias = upload_floats(dt_bias), da = upload_floats(a_scale);
  cuda::DeviceBuffer dwork(std::max<uint64_t>(cuda::gated_delta_rule_work_bytes(n, int(Hv)), 4));
  // Token by token, then (runs of 16 tokens or more) in chunks: both within f32 rounding of the CPU's recurrence.
  for (const bool chunked : {false, true}) {
    auto dstate = upload_floats(state0);
    cuda::DeviceBuffer dout(n * Hv * S * 4), dsave(Hv * S * S * 4);
    const float* c = dconv.as<float>();
    cuda::gated_delta_rule({.q = c, .k = c + Hk * S, .v = c + 2 * Hk * S, .stride = stride,
                            .alpha = dalpha.as<float>(), .beta = dbeta.as<float>(), .dt_bias = dbias.as<float>(),
                            .a_scale = da.as<float>(), .state = dstate.as<float>(), .out = dout.as<float>(),
                            .n_tok = n, .n_k_heads = int(Hk), .n_v_heads = int(Hv), .head_dim = int(S),
                            .save = save_after ? dsave.as<float>() : nullptr, .save_after = save_after,
                            .work = chunked ? dwork.as<float>() : nullptr});
    const double d_out = rel_diff(download<float>(dout, want.size()), want);
    const double d_state = rel_diff(download<float>(dstate, state.size()), state);
    const double d_save = save_after ? rel_diff(download<float>(dsave, want_save.size()), want_save) : 0.0;
    std::printf("[delta-net rule] n %lld %s: max rel diff out %.3g, state %.3g, copy %.3g\n", (long long)n,
                chunked ? "chunked" : "by token", d_out, d_state, d_save);
    // The gates' libm and CUDA exponentials differ by an ulp or two and every token's dot products by their order
    // (the chunks' by their form); the state carries both from token to token. A wrong index is off by the values'
    // own size.
    EXPECT_LE(d_out, 1e-4);
    EXPECT_LE(d_state, 1e-4);
    EXPECT_LE(d_save, 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Tokens, CudaDeltaNet, ::testing::Values(int64_t(1), int64_t(2), int64_t(37), int64_t(64),
                                                                    int64_t(150)),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

// The attention layer's query split and output gate, and the shared expert's gated add, against the CPU forward's
// formulas (the same roundings: equal bit for bit up to the exponential's last ulp).
TEST(CudaHybridGates, SplitQueryAndSigmoidGatesMatchTheCpu) {
  DF_REQUIRE_GPU();
  const int64_t n = 3, H = 2, D = 256, E = 96;
  const auto q_gate = random_floats(n * H * 2 * D, 41, -6.0f, 6.0f);
  const auto attn = random_floats(n * H * D, 42);
  const auto x = random_floats(n * E, 43), y = random_floats(n * E, 44);
  const auto logit = random_floats(n, 45, -5.0f, 5.0f);
  std::vector<float> want_q(n * H * D), want_attn = attn, want_x = x;
  for (int64_t r = 0; r < n * H; ++r)
    for (int64_t d = 0; d < D; ++d) {
      want_q[r * D + d] = q_gate[r * 2 * D + d];
      want_attn[r * D + d] *= cpu::sigmoid(q_gate[r * 2 * D + D + d]);
    }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < E; ++i) want_x[t * E + i] += y[t * E + i] * cpu::sigmoid(logit[t]);

  auto dqg = upload_floats(q_gate), dattn = upload_floats(attn), dx = upload_floats(x), dy = upload_floats(y);
  auto dlogit = upload_floats(logit);
  cuda::DeviceBuffer dq(n * H * D * 4);
  cuda::split_query({.q_gate = dqg.as<float>(), .q = dq.as<float>(), .n_tok = n, .n_head = int(H), .head_dim = int(D)});
  cuda::sigmoid_gate({.x = dattn.as<float>(), .q_gate = dqg.as<float>(), .n_tok = n, .n_head = int(H),
                      .head_dim = int(D)});
  cuda::add_sigmoid_scaled({.x = dx.as<float>(), .y = dy.as<float>(), .logit = dlogit.as<float>(), .n_tok = n, .n = E});
  EXPECT_EQ(download<float>(dq, want_q.size()), want_q);
  EXPECT_LE(rel_diff(download<float>(dattn, want_attn.size()), want_attn), 1e-6);
  EXPECT_LE(rel_diff(download<float>(dx, want_x.size()), want_x), 1e-6);
}

}  // namespace
}  // namespace df::test
