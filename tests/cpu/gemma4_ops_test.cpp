// The ops gemma4 adds: GELU through llama.cpp's f16 table, RoPE with frequency divisors, attention over a sliding
// window, RMS norm without a weight.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "diskformer/backend/cpu/numeric.h"
#include "diskformer/backend/cpu/ops.h"
#include "support/random.h"

namespace df::cpu {
namespace {

using test::randn;

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

TEST(Gemma4Ops, GeluIsTheTanhFormRoundedThroughF16) {
  const std::vector<float> x = {-12.0f, -10.0f, -3.5f, -1.0f, -0.01f, 0.0f, 0.3f, 1.0f, 2.5f, 9.99f, 10.0f, 31.0f};
  std::vector<float> y(x.size());
  gelu(x.data(), int64_t(x.size()), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] <= -10.0f) {
      EXPECT_EQ(y[i], 0.0f) << x[i];
    } else if (x[i] >= 10.0f) {
      EXPECT_EQ(y[i], x[i]);
    } else {
      // The table holds f16 results of f16 inputs: within two f16 steps of the exact value.
      EXPECT_NEAR(y[i], gelu_ref(x[i]), 2e-3 * std::max(1.0, std::fabs(double(x[i])))) << x[i];
      EXPECT_EQ(f32_to_f16(y[i]), f32_to_f16(f16_to_f32(f32_to_f16(y[i]))));  // an f16 value
    }
  }
  // gelu(gate) * up, one rounding after the lookup; nothing below -10.
  const std::vector<float> gate = {-11.0f, 0.5f, 12.0f}, up = {-3.0f, 2.0f, 0.5f};
  std::vector<float> g(3), ref(3);
  geglu(gate.data(), up.data(), 3, g.data());
  gelu(gate.data(), 3, ref.data());
  EXPECT_EQ(std::signbit(g[0]), false);
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_EQ(g[1], ref[1] * up[1]);
  EXPECT_EQ(g[2], 12.0f * 0.5f);
}

TEST(Gemma4Ops, RopeFrequencyDivisors) {
  const int heads = 2, dim = 16, rot = 16;
  const auto x = randn(heads * dim, 1);
  std::vector<float> plain = x, ones = x, big = x;
  std::vector<float> f1(rot / 2, 1.0f), fbig(rot / 2, 1.0f);
  for (int i = rot / 8; i < rot / 2; ++i) fbig[i] = 1e30f;
  rope(plain.data(), heads, dim, rot, 37, 1e6f, model::RopeStyle::kNeox);
  rope(ones.data(), heads, dim, rot, 37, 1e6f, model::RopeStyle::kNeox, f1.data());
  rope(big.data(), heads, dim, rot, 37, 1e6f, model::RopeStyle::kNeox, fbig.data());
  EXPECT_EQ(plain, ones);  // a divisor of 1 changes no angle
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < rot / 2; ++i) {
      const int a = h * dim + i, b = a + rot / 2;
      if (i < rot / 8) {
        EXPECT_EQ(big[a], plain[a]);
        EXPECT_EQ(big[b], plain[b]);
      } else {  // an angle of ~1e-28 turns nothing
        EXPECT_EQ(big[a], x[a]);
        EXPECT_EQ(big[b], x[b]);
      }
    }
}

TEST(Gemma4Ops, SlidingWindowAttentionSeesTheLastPositionsOnly) {
  const int H = 2, Hkv = 1, D = 32;
  const int64_t n_pos = 40, window = 8;
  const auto k32 = randn(n_pos * Hkv * D, 2), v32 = randn(n_pos * Hkv * D, 3), q = randn(H * D, 4);
  std::vector<uint16_t> k(k32.size()), v(v32.size());
  for (size_t i = 0; i < k.size(); ++i) k[i] = f32_to_f16(k32[i]), v[i] = f32_to_f16(v32[i]);
  Context ctx;
  // The last of 40 positions with a window of 8 ...
  std::vector<float> windowed(H * D), cut(H * D), full(H * D);
  attention(ctx, {.q = q.data(), .k = k.data(), .v = v.data(), .out = windowed.data(), .n_head = H, .n_head_kv = Hkv,
                  .head_dim_k = D, .head_dim_v = D, .pos0 = n_pos - 1, .n_tok = 1, .scale = 1.0f, .window = window});
  // ... equals plain causal attention over a cache that holds only those 8 positions, bit for bit (same order).
  const int64_t first = n_pos - window;
  attention(ctx, {.q = q.data(), .k = k.data() + first * Hkv * D, .v = v.data() + first * Hkv * D, .out = cut.data(),
                  .n_head = H, .n_head_kv = Hkv, .head_dim_k = D, .head_dim_v = D, .pos0 = window - 1, .n_tok = 1,
                  .scale = 1.0f});
  EXPECT_EQ(windowed, cut);
  // A window past the sequence's length masks nothing.
  std::vector<float> wide(H * D);
  attention(ctx, {.q = q.data(), .k = k.data(), .v = v.data(), .out = full.data(), .n_head = H, .n_head_kv = Hkv,
                  .head_dim_k = D, .head_dim_v = D, .pos0 = n_pos - 1, .n_tok = 1, .scale = 1.0f});
  attention(ctx, {.q = q.data(), .k = k.data(), .v = v.data(), .out = wide.data(), .n_head = H, .n_head_kv = Hkv,
                  .head_dim_k = D, .head_dim_v = D, .pos0 = n_pos - 1, .n_tok = 1, .scale = 1.0f, .window = 1000});
  EXPECT_EQ(full, wide);
  EXPECT_NE(full, windowed);
}

TEST(Gemma4Ops, RmsNormWithoutWeight) {
  const auto x = randn(64, 5);
  std::vector<float> ones(64, 1.0f), a(64), b(64);
  rms_norm(x.data(), nullptr, 64, 1e-6f, a.data());
  rms_norm(x.data(), ones.data(), 64, 1e-6f, b.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace df::cpu
