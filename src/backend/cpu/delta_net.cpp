#include "diskformer/backend/cpu/delta_net.h"

#include <algorithm>
#include <vector>

#include "diskformer/util/check.h"

namespace df::cpu {

void silu(const Kernels& k, const float* x, int64_t n, float* y) { k.silu(n, x, y); }

void l2_norm(const float* x, int64_t n, float eps, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
  const float scale = 1.0f / std::max(std::sqrt(float(sum)), eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
}

void causal_conv1d(Context& ctx, const ConvArgs& a) {
  const int64_t C = a.channels, W = a.kernel - 1, n = a.n_tok;
  // Channels in blocks over the pool; within a channel every sum runs in the order of the kernel's taps.
  const int64_t block = 256, n_blocks = (C + block - 1) / block;
  ctx.parallel(n_blocks, [&](int64_t b) {
    const int64_t c0 = b * block, c1 = std::min(C, c0 + block);
    for (int64_t t = 0; t < n; ++t) {
      float* y = a.y + t * C;
      for (int64_t c = c0; c < c1; ++c) {
        const float* w = a.w + c * a.kernel;
        // As llama.cpp's x86 build computes its sum over the taps: the products of whole groups of 8 taps, then of
        // one group of 4, each rounded and added in tap order; the last taps (fewer than 4) fused into the sum.
        const int64_t taps = W + 1, grouped = taps / 8 * 8 + (taps % 8 >= 4 ? 4 : 0);
        float sum = 0.0f;
        for (int64_t i = 0; i < taps; ++i) {
          const int64_t r = t + i;  // row of the window followed by the batch
          const float in = r < W ? a.window[r * C + c] : a.x[(r - W) * C + c];
          if (i < grouped) {
            const float p = in * w[i];
            sum += p;
          } else {
            sum = std::fma(in, w[i], sum);
          }
        }
        y[c] = sum;
      }
    }
    // The new window: the last W rows of the window followed by the batch.
    for (int64_t r = 0; r < W; ++r) {
      const int64_t src = n + r;  // row of the window followed by the batch
      if (src < W) {
        std::copy(a.window + src * C + c0, a.window + src * C + c1, a.window + r * C + c0);
      } else {
        std::copy(a.x + (src - W) * C + c0, a.x + (src - W) * C + c1, a.window + r * C + c0);
      }
    }
  });
}

void gated_delta_rule(Context& ctx, const DeltaRuleArgs& a) {
  const Kernels& k = *ctx.kernels;
  const int S = a.head_dim;
  DF_CHECK(a.n_k_heads > 0 && a.n_v_heads % a.n_k_heads == 0);
  const float scale = 1.0f / std::sqrt(float(S));
  ctx.parallel(a.n_v_heads, [&](int64_t h) {
    float* st = a.state + h * int64_t(S) * S;
    const int64_t hk = h % a.n_k_heads;
    std::vector<float> delta(static_cast<size_t>(S));
    for (int64_t t = 0; t < a.n_tok; ++t) {
      const float* q = a.q + t * a.stride + hk * S;
      const float* kk = a.k + t * a.stride + hk * S;
      const float* v = a.v + t * a.stride + h * S;
      const float decay = std::exp(a.g[t * a.n_v_heads + h]);
      const float beta = a.beta[t * a.n_v_heads + h];
      for (int64_t i = 0; i < int64_t(S) * S; ++i) st[i] *= decay;
      for (int j = 0; j < S; ++j) delta[j] = (v[j] - k.dot_f32_single(S, st + int64_t(j) * S, kk)) * beta;
      for (int j = 0; j < S; ++j) k.mad_f32(S, st + int64_t(j) * S, kk, delta[j]);
      float* out = a.out + (t * a.n_v_heads + h) * S;
      for (int j = 0; j < S; ++j) out[j] = k.dot_f32_single(S, st + int64_t(j) * S, q) * scale;
      if (a.save && t + 1 == a.save_after) std::copy_n(st, int64_t(S) * S, a.save + h * int64_t(S) * S);
    }
  });
}

}  // namespace df::cpu
