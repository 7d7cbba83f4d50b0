// The Gated DeltaNet layer's steps on the GPU: the causal convolution with its window, the q/k L2 norms and the
// gated delta rule with its state (cpu/delta_net.cpp is the reference). Roundings are spelled out (__f*_rn) where the
// CPU rounds each operation, so nvcc does not fuse them; the CPU's fused multiply-adds are __fmaf_rn.
#include "backend/cuda/common.cuh"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/cudart/check.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

constexpr int kConvThreads = 256;
constexpr int kWarpsPerBlock = 4;  // l2 norm and delta rule: a warp per head / per state row

__device__ __forceinline__ float silu(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : logf(__fadd_rn(1.0f, expf(x))); }

// A thread per channel and chunk of kConvChunk tokens (blockIdx.y: a prompt of 512 spreads over 32 times the
// threads, where a thread per channel left most SMs idle); `in` is the window's kernel - 1 rows followed by
// the batch's rows. Chunk 0 alone reads the old window (a chunk holds at least kernel - 1 tokens), so it alone copies
// it (save) and, after its own reads, replaces it; a batch of fewer than kernel - 1 tokens is one chunk.
constexpr int kConvChunk = 16;

__global__ void __launch_bounds__(kConvThreads)
    causal_conv1d_silu_kernel(const float* __restrict__ x, int64_t n_tok, int64_t C, const float* __restrict__ w,
                              int K, float* __restrict__ window, float* __restrict__ y, float* __restrict__ save,
                              int64_t save_after) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t W = K - 1;
  const int64_t t0 = int64_t(blockIdx.y) * kConvChunk, t1 = t0 + kConvChunk < n_tok ? t0 + kConvChunk : n_tok;
  auto in = [&](int64_t r) { return r < W ? window[r * C + c] : x[(r - W) * C + c]; };
  if (save && t0 == 0)
    for (int64_t r = 0; r < W; ++r) save[r * C + c] = in(save_after + r);
  const float* wc = w + c * K;
  // cpu::causal_conv1d's order: the products of whole groups of 8 taps, then of one group of 4, rounded and added in
  // tap order; the last taps (fewer than 4) fused into the sum.
  const int grouped = K / 8 * 8 + (K % 8 >= 4 ? 4 : 0);
  for (int64_t t = t0; t < t1; ++t) {
    float sum = 0.0f;
    for (int i = 0; i < K; ++i) {
      const float v = in(t + i);
      sum = i < grouped ? __fadd_rn(sum, __fmul_rn(v, wc[i])) : __fmaf_rn(v, wc[i], sum);
    }
    y[t * C + c] = silu(sum);
  }
  // Row r of the new window is row n_tok + r of `in`: a later row than r, so not yet overwritten.
  if (t0 == 0)
    for (int64_t r = 0; r < W; ++r) window[r * C + c] = in(n_tok + r);
}

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    l2_norm_heads_kernel(float* x, int64_t n_tok, int64_t stride, int n_heads, int D, float eps) {
  const int64_t head = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (head >= n_tok * n_heads) return;  // the whole warp
  float* p = x + (head / n_heads) * stride + (head % n_heads) * D;
  double sum = 0.0;
  for (int i = lane; i < D; i += 32) sum += double(__fmul_rn(p[i], p[i]));
  sum = dev::warp_sum(sum);
  const float scale = __fdiv_rn(1.0f, fmaxf(sqrtf(float(sum)), eps));
  for (int i = lane; i < D; i += 32) p[i] = __fmul_rn(p[i], scale);
}

// Row j of v head h's state (what output j reads): lane l holds its elements l, l + 32, ...; rows never interact,
// so the row stays in registers over the batch.
template <int S>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gated_delta_rule_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                            int64_t stride, const float* __restrict__ alpha, const float* __restrict__ beta_in,
                            const float* __restrict__ dt_bias, const float* __restrict__ a_scale,
                            float* __restrict__ state, float* __restrict__ out, int64_t n_tok, int n_k_heads,
                            int n_v_heads, float* __restrict__ save, int64_t save_after) {
  constexpr int kPer = S / 32;
  const int h = blockIdx.y;
  const int j = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (j >= S) return;  // the whole warp
  const int64_t hk = h % n_k_heads;
  float* row = state + (int64_t(h) * S + j) * S;
  float st[kPer];
#pragma unroll
  for (int m = 0; m < kPer; ++m) st[m] = row[lane + 32 * m];
  const float scale = __fdiv_rn(1.0f, sqrtf(float(S)));
  const float bias = dt_bias[h], a = a_scale[h];
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* qt = q + t * stride + hk * S;
    const float* kt = k + t * stride + hk * S;
    const float vj = v[t * stride + int64_t(h) * S + j];
    const float beta = sigmoid(beta_in[t * n_v_heads + h]);
    const float decay = expf(__fmul_rn(softplus(__fadd_rn(alpha[t * n_v_heads + h], bias)), a));
    float kk[kPer], kv = 0.0f;
#pragma unroll
    for (int m = 0; m < kPer; ++m) {
      kk[m] = kt[lane + 32 * m];
      st[m] = __fmul_rn(st[m], decay);
      kv = __fmaf_rn(st[m], kk[m], kv);
    }
    kv = dev::warp_sum(kv);
    const float delta = __fmul_rn(__fsub_rn(vj, kv), beta);
    float o = 0.0f;
#pragma unroll
    for (int m = 0; m < kPer; ++m) {
      st[m] = __fmaf_rn(kk[m], delta, st[m]);
      o = __fmaf_rn(st[m], qt[lane + 32 * m], o);
    }
    o = dev::warp_sum(o);
    if (lane == 0) out[(t * n_v_heads + h) * S + j] = __fmul_rn(o, scale);
    if (save != nullptr && t + 1 == save_after) {
      float* srow = save + (int64_t(h) * S + j) * S;
#pragma unroll
      for (int m = 0; m < kPer; ++m) srow[lane + 32 * m] = st[m];
    }
  }
#pragma unroll
  for (int m = 0; m < kPer; ++m) row[lane + 32 * m] = st[m];
}

unsigned blocks_of(int64_t n, int64_t per) {
  const int64_t g = (n + per - 1) / per;
  DF_CHECK(g > 0 && g <= 0x7fffffff);
  return unsigned(g);
}

}  // namespace

void causal_conv1d_silu(const CausalConvArgs& a) {
  DF_CHECK(a.x != nullptr && a.w != nullptr && a.window != nullptr && a.y != nullptr);
  DF_CHECK(a.n_tok >= 0 && a.channels > 0 && a.kernel >= 2 && a.kernel <= 16);
  DF_CHECK(a.y != a.x && a.y != a.window);
  DF_CHECK(a.save == nullptr || (a.save_after > 0 && a.save_after < a.n_tok));
  if (a.n_tok == 0) return;
  static_assert(kConvChunk >= 16 - 1);  // the longest window: chunk 0 alone reads it
  const dim3 grid(blocks_of(a.channels, kConvThreads), blocks_of(a.n_tok, kConvChunk));
  DF_CHECK(grid.y <= 65535);
  causal_conv1d_silu_kernel<<<grid, kConvThreads, 0, a.stream>>>(
      a.x, a.n_tok, a.channels, a.w, a.kernel, a.window, a.y, a.save, a.save_after);
  DF_CUDA_CHECK_LAUNCH();
}

void l2_norm_heads(const L2NormHeadsArgs& a) {
  DF_CHECK(a.x != nullptr && a.n_tok >= 0 && a.n_heads > 0 && a.head_dim > 0);
  DF_CHECK(a.stride >= int64_t(a.n_heads) * a.head_dim);
  if (a.n_tok == 0) return;
  l2_norm_heads_kernel<<<blocks_of(a.n_tok * a.n_heads, kWarpsPerBlock), kWarpsPerBlock * 32, 0, a.stream>>>(
      a.x, a.n_tok, a.stride, a.n_heads, a.head_dim, a.eps);
  DF_CUDA_CHECK_LAUNCH();
}

void gated_delta_rule(const GatedDeltaRuleArgs& a) {
  DF_CHECK(a.q != nullptr && a.k != nullptr && a.v != nullptr && a.alpha != nullptr && a.beta != nullptr);
  DF_CHECK(a.dt_bias != nullptr && a.a_scale != nullptr && a.state != nullptr && a.out != nullptr);
  DF_CHECK(a.n_tok >= 0 && a.n_k_heads > 0 && a.n_v_heads > 0 && a.n_v_heads % a.n_k_heads == 0);
  DF_CHECK(a.n_v_heads <= 65535 && (a.head_dim == 64 || a.head_dim == 128));
  DF_CHECK(a.stride >= int64_t(a.n_v_heads) * a.head_dim);
  DF_CHECK(a.save == nullptr || (a.save_after > 0 && a.save_after < a.n_tok));
  if (a.n_tok == 0) return;
  const dim3 grid(unsigned(a.head_dim / kWarpsPerBlock), unsigned(a.n_v_heads));
  auto kernel = a.head_dim == 64 ? gated_delta_rule_kernel<64> : gated_delta_rule_kernel<128>;
  kernel<<<grid, kWarpsPerBlock * 32, 0, a.stream>>>(a.q, a.k, a.v, a.stride, a.alpha, a.beta, a.dt_bias, a.a_scale,
                                                     a.state, a.out, a.n_tok, a.n_k_heads, a.n_v_heads, a.save,
                                                     a.save_after);
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
