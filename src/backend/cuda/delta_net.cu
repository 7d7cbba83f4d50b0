// The Gated DeltaNet layer's steps on the GPU: the causal convolution with its window, the q/k L2 norms and the
// gated delta rule with its state (cpu/delta_net.cpp is the reference). Roundings are spelled out (__f*_rn) where the
// CPU rounds each operation, so nvcc does not fuse them; the CPU's fused multiply-adds are __fmaf_rn.
#include "backend/cuda/common.cuh"
#include "diskformer/backend/cuda/buffers.h"
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

__device__ __forceinline__ float delta_gate(const float* alpha, const float* dt_bias, const float* a_scale, int h) {
  return __fmul_rn(softplus(__fadd_rn(*alpha, dt_bias[h])), a_scale[h]);
}

// Token by token (decode, short batches): row j of v head h's state (what output j reads): lane l holds its elements
// l, l + 32, ...; rows never interact, so the row stays in registers over the batch.
template <int S>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gated_delta_rule_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                            int64_t stride, const float* __restrict__ alpha, const float* __restrict__ beta_in,
                            const float* __restrict__ dt_bias, const float* __restrict__ a_scale,
                            float* __restrict__ state, float* __restrict__ out, int64_t n_tok, int n_k_heads,
                            int n_v_heads) {
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
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* qt = q + t * stride + hk * S;
    const float* kt = k + t * stride + hk * S;
    const float vj = v[t * stride + int64_t(h) * S + j];
    const float beta = sigmoid(beta_in[t * n_v_heads + h]);
    const float decay = expf(delta_gate(alpha + t * n_v_heads + h, dt_bias, a_scale, h));
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
  }
#pragma unroll
  for (int m = 0; m < kPer; ++m) row[lane + 32 * m] = st[m];
}

// The chunked form (prefill). Within a chunk of kChunk tokens, with G_t the chunk's cumulative log decay up to token t
// and M0 the state before it (M[i][j]: k element i, v element j), every token's update delta_t follows from M0 and the
// earlier tokens' updates:
//   (I + L) U = beta V - diag(beta exp(G)) K M0,   L[t][s] = beta_t exp(G_t - G_s) k_t.k_s  (s < t)
//   O = scale (diag(exp(G)) Q M0 + P U),           P[t][s] = exp(G_t - G_s) q_t.k_s         (s <= t)
//   M1 = exp(G_last) M0 + sum_s exp(G_last - G_s) k_s u_s^T
// The chunks' T = (I + L)^-1 and P need no state: chunk_prep computes them for every chunk at once; chunk_scan then
// walks the chunks in order, each block holding kScanCols columns of one head's state in shared memory. Its sums run in
// another order than the token-by-token recurrence's (exponentials of differences of G instead of products of decays):
// the same values within f32 rounding.
constexpr int kChunk = kDeltaChunk;
constexpr int64_t kChunkWorkFloats = kDeltaChunkWorkFloats;  // per chunk and v head: T, P, G, beta
constexpr int kChunkThreads = 256;
constexpr int kScanCols = 32;  // v columns of a head per scan block

template <int S>
struct PrepSmem {
  float k[kChunk][S + 1], q[kChunk][S + 1];  // + 1: rows start in other banks
  float l[kChunk][kChunk + 1];
  float g[kChunk], beta[kChunk];
};

template <int S>
struct ScanChunk {  // one chunk's inputs: its q and k rows, T, P, G and beta
  float k[kChunk][S + 1];
  float q[kChunk][S + 1];
  float t[kChunk][kChunk + 1];
  float p[kChunk][kChunk + 1];
  float g[kChunk], beta[kChunk];
};

// Two chunks' inputs: the next one's copies land while the block works on this one (219 KiB for heads of 128).
template <int S>
struct ScanSmem {
  ScanChunk<S> in[2];
  alignas(16) float m[S][kScanCols];       // the state's columns j0 .. j0 + kScanCols, as M[i][j]
  alignas(16) float u[kChunk][kScanCols];  // R, then U
  float kd[kChunk];
};

// The chunk's q and k rows of k head hk into shared memory; rows past the batch are zeros.
template <int S>
__device__ __forceinline__ void load_chunk_qk(const float* __restrict__ q, const float* __restrict__ k, int64_t stride,
                                              int64_t hk, int64_t t0, int64_t n_tok, float (*sq)[S + 1],
                                              float (*sk)[S + 1]) {
  for (int idx = threadIdx.x; idx < kChunk * S; idx += kChunkThreads) {
    const int r = idx / S, i = idx % S;
    const int64_t t = t0 + r;
    const bool in = t < n_tok;
    sk[r][i] = in ? k[t * stride + hk * S + i] : 0.0f;
    sq[r][i] = in ? q[t * stride + hk * S + i] : 0.0f;
  }
}

// Grid (chunks, v heads).
template <int S>
__global__ void __launch_bounds__(kChunkThreads)
    delta_chunk_prep_kernel(const float* __restrict__ q, const float* __restrict__ k, int64_t stride,
                            const float* __restrict__ alpha, const float* __restrict__ beta_in,
                            const float* __restrict__ dt_bias, const float* __restrict__ a_scale, int64_t n_tok,
                            int n_k_heads, int n_v_heads, float* __restrict__ work) {
  extern __shared__ float4 smem_raw[];
  PrepSmem<S>& sm = *reinterpret_cast<PrepSmem<S>*>(smem_raw);
  const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int64_t t0 = int64_t(c) * kChunk;
  if (tid < 32) {  // the gates, and G as an inclusive scan (tokens past the batch: no decay, no update)
    float g[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = tid + 32 * half;
      const int64_t t = t0 + r;
      g[half] = t < n_tok ? delta_gate(alpha + t * n_v_heads + h, dt_bias, a_scale, h) : 0.0f;
      sm.beta[r] = t < n_tok ? sigmoid(beta_in[t * n_v_heads + h]) : 0.0f;
    }
#pragma unroll
    for (int off = 1; off < 32; off *= 2)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float o = __shfl_up_sync(0xffffffffu, g[half], off);
        if (tid >= off) g[half] += o;
      }
    sm.g[tid] = g[0];
    sm.g[tid + 32] = g[1] + __shfl_sync(0xffffffffu, g[0], 31);
  }
  load_chunk_qk<S>(q, k, stride, h % n_k_heads, t0, n_tok, sm.q, sm.k);
  __syncthreads();

  float* T = work + (int64_t(c) * n_v_heads + h) * kChunkWorkFloats;
  float* P = T + kChunk * kChunk;
  float* G = P + kChunk * kChunk;
  float* B = G + kChunk;
  {  // k_t.k_s and q_t.k_s: rows ty + 16 a, columns tx + 16 b
    const int ty = tid / 16, tx = tid % 16;
    float kk[4][4] = {}, qk[4][4] = {};
    for (int i = 0; i < S; ++i) {
      float ka[4], qa[4], kb[4];
#pragma unroll
      for (int a = 0; a < 4; ++a)
        ka[a] = sm.k[ty + 16 * a][i], qa[a] = sm.q[ty + 16 * a][i], kb[a] = sm.k[tx + 16 * a][i];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) kk[a][b] = fmaf(ka[a], kb[b], kk[a][b]), qk[a][b] = fmaf(qa[a], kb[b], qk[a][b]);
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int t = ty + 16 * a, s = tx + 16 * b;
        const float e = s <= t ? expf(sm.g[t] - sm.g[s]) : 0.0f;
        sm.l[t][s] = s < t ? sm.beta[t] * e * kk[a][b] : 0.0f;
        P[t * kChunk + s] = e * qk[a][b];
      }
  }
  __syncthreads();
  {  // T = (I + L)^-1 by forward substitution, a column per 4 lanes, each holding every 4th row
    const int lane = tid % 32, col = tid / 32 * 8 + lane / 4, r = lane % 4;
    float acc[kChunk / 4];
#pragma unroll
    for (int m = 0; m < kChunk / 4; ++m) acc[m] = 4 * m + r == col ? 1.0f : 0.0f;
#pragma unroll
    for (int s = 0; s < kChunk; ++s) {
      const float xs = __shfl_sync(0xffffffffu, acc[s / 4], (lane & ~3) | (s % 4));  // T[s][col], final
#pragma unroll
      for (int m = 0; m < kChunk / 4; ++m)
        if (4 * m + r > s) acc[m] = fmaf(-sm.l[4 * m + r][s], xs, acc[m]);
    }
#pragma unroll
    for (int m = 0; m < kChunk / 4; ++m) T[(4 * m + r) * kChunk + col] = acc[m];
  }
  if (tid < kChunk) G[tid] = sm.g[tid], B[tid] = sm.beta[tid];
}

// acc += rows ty and ty + 32 of m (kChunk x kChunk) times columns c4 .. c4 + 3 of x (kChunk x kScanCols).
__device__ __forceinline__ void add_chunk_product(const float (*m)[kChunk + 1], const float (*x)[kScanCols], int ty,
                                                  int c4, float (&acc)[2][4]) {
  for (int s = 0; s < kChunk; ++s) {
    const float4 xv = *reinterpret_cast<const float4*>(&x[s][c4]);
    const float xc[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      const float mv = m[ty + 32 * a][s];
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[a][e] = fmaf(mv, xc[e], acc[a][e]);
    }
  }
}

// Starts the copies of chunk t0's inputs (k head hk, v head h) into c; rows past the batch are zeros.
template <int S>
__device__ __forceinline__ void copy_chunk(ScanChunk<S>& c, const float* __restrict__ q, const float* __restrict__ k,
                                           int64_t stride, const float* __restrict__ work, int64_t hk, int h,
                                           int64_t t0, int64_t n_tok, int n_v_heads) {
  for (int idx = threadIdx.x; idx < kChunk * S; idx += kChunkThreads) {
    const int r = idx / S, i = idx % S;
    const bool in = t0 + r < n_tok;
    const int64_t at = in ? (t0 + r) * stride + hk * S + i : 0;
    dev::cp_async4_or_zero(&c.k[r][i], k + at, in);
    dev::cp_async4_or_zero(&c.q[r][i], q + at, in);
  }
  const float* T = work + (t0 / kChunk * n_v_heads + h) * kChunkWorkFloats;
  const float* P = T + kChunk * kChunk;
  const float* G = P + kChunk * kChunk;
  const float* B = G + kChunk;
  for (int idx = threadIdx.x; idx < kChunk * kChunk; idx += kChunkThreads) {
    dev::cp_async4(&c.t[idx / kChunk][idx % kChunk], T + idx);
    dev::cp_async4(&c.p[idx / kChunk][idx % kChunk], P + idx);
  }
  if (threadIdx.x < kChunk) {
    dev::cp_async4(&c.g[threadIdx.x], G + threadIdx.x);
    dev::cp_async4(&c.beta[threadIdx.x], B + threadIdx.x);
  }
}

// Grid (S / kScanCols, v heads): the chunks in order. Thread (ty, tx) computes rows ty and ty + 32 of a chunk's
// kChunk x kScanCols products at columns 4 tx .. 4 tx + 3, and rows ty + 32 a of the state's.
template <int S>
__global__ void __launch_bounds__(kChunkThreads)
    delta_chunk_scan_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                            int64_t stride, const float* __restrict__ work, float* __restrict__ state,
                            float* __restrict__ out, int64_t n_tok, int n_k_heads, int n_v_heads) {
  extern __shared__ float4 smem_raw[];
  ScanSmem<S>& sm = *reinterpret_cast<ScanSmem<S>*>(smem_raw);
  const int h = blockIdx.y, j0 = blockIdx.x * kScanCols, tid = threadIdx.x;
  const int ty = tid / 8, c4 = tid % 8 * 4;
  float* st = state + int64_t(h) * S * S;  // st[j][i]: row j of v head h
  for (int idx = tid; idx < S * kScanCols; idx += kChunkThreads) {
    const int i = idx / kScanCols, c = idx % kScanCols;
    sm.m[i][c] = st[int64_t(j0 + c) * S + i];
  }
  const float scale = __fdiv_rn(1.0f, sqrtf(float(S)));
  const float* vh = v + int64_t(h) * S + j0 + c4;
  const int hk = h % n_k_heads;
  copy_chunk<S>(sm.in[0], q, k, stride, work, hk, h, 0, n_tok, n_v_heads);
  dev::cp_async_commit();
  for (int64_t t0 = 0; t0 < n_tok; t0 += kChunk) {
    // The next chunk's buffer was last read by the chunk before this one, which every thread finished before the
    // barrier that ended it.
    if (t0 + kChunk < n_tok)
      copy_chunk<S>(sm.in[(t0 / kChunk + 1) % 2], q, k, stride, work, hk, h, t0 + kChunk, n_tok, n_v_heads);
    dev::cp_async_commit();
    dev::cp_async_wait_prior();
    __syncthreads();
    const ScanChunk<S>& c = sm.in[t0 / kChunk % 2];

    // K M0 and Q M0; R = beta V - beta exp(G) K M0 into u.
    float km[2][4] = {}, qm[2][4] = {};
    for (int i = 0; i < S; ++i) {
      const float4 mv = *reinterpret_cast<const float4*>(&sm.m[i][c4]);
      const float mc[4] = {mv.x, mv.y, mv.z, mv.w};
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        const float kv = c.k[ty + 32 * a][i], qv = c.q[ty + 32 * a][i];
#pragma unroll
        for (int e = 0; e < 4; ++e) km[a][e] = fmaf(kv, mc[e], km[a][e]), qm[a][e] = fmaf(qv, mc[e], qm[a][e]);
      }
    }
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      const int r = ty + 32 * a;
      const float b = c.beta[r], bg = b * expf(c.g[r]);
      float4 vv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (t0 + r < n_tok) vv = *reinterpret_cast<const float4*>(vh + (t0 + r) * stride);
      const float vc[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) sm.u[r][c4 + e] = b * vc[e] - bg * km[a][e];
    }
    if (tid < kChunk) sm.kd[tid] = expf(c.g[kChunk - 1] - c.g[tid]);
    __syncthreads();

    // U = T R.
    float uu[2][4] = {};
    add_chunk_product(c.t, sm.u, ty, c4, uu);
    __syncthreads();
#pragma unroll
    for (int a = 0; a < 2; ++a)
      *reinterpret_cast<float4*>(&sm.u[ty + 32 * a][c4]) = make_float4(uu[a][0], uu[a][1], uu[a][2], uu[a][3]);
    __syncthreads();

    // O = scale (exp(G) Q M0 + P U).
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      const float gam = expf(c.g[ty + 32 * a]);
#pragma unroll
      for (int e = 0; e < 4; ++e) qm[a][e] *= gam;
    }
    add_chunk_product(c.p, sm.u, ty, c4, qm);
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      const int64_t t = t0 + ty + 32 * a;
      if (t < n_tok)
        *reinterpret_cast<float4*>(out + (t * n_v_heads + h) * S + j0 + c4) =
            make_float4(qm[a][0] * scale, qm[a][1] * scale, qm[a][2] * scale, qm[a][3] * scale);
    }

    // M1 = exp(G_last) M0 + sum_s exp(G_last - G_s) k_s u_s^T, over this thread's own elements of m.
    {
      constexpr int kRows = S / 32;
      const float decay = expf(c.g[kChunk - 1]);
      float mm[kRows][4];
#pragma unroll
      for (int a = 0; a < kRows; ++a) {
        const float4 mv = *reinterpret_cast<const float4*>(&sm.m[ty + 32 * a][c4]);
        mm[a][0] = decay * mv.x, mm[a][1] = decay * mv.y, mm[a][2] = decay * mv.z, mm[a][3] = decay * mv.w;
      }
      for (int s = 0; s < kChunk; ++s) {
        const float4 uv = *reinterpret_cast<const float4*>(&sm.u[s][c4]);
        const float uc[4] = {uv.x, uv.y, uv.z, uv.w};
        const float w = sm.kd[s];
#pragma unroll
        for (int a = 0; a < kRows; ++a) {
          const float kv = c.k[s][ty + 32 * a] * w;
#pragma unroll
          for (int e = 0; e < 4; ++e) mm[a][e] = fmaf(kv, uc[e], mm[a][e]);
        }
      }
#pragma unroll
      for (int a = 0; a < kRows; ++a)
        *reinterpret_cast<float4*>(&sm.m[ty + 32 * a][c4]) = make_float4(mm[a][0], mm[a][1], mm[a][2], mm[a][3]);
    }
    __syncthreads();
  }
  for (int idx = tid; idx < S * kScanCols; idx += kChunkThreads) {
    const int i = idx / kScanCols, c = idx % kScanCols;
    st[int64_t(j0 + c) * S + i] = sm.m[i][c];
  }
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

namespace {

template <int S>
void chunked_delta_rule(const GatedDeltaRuleArgs& a) {
  static_assert(S % kScanCols == 0 && S % 32 == 0);
  // v rows and outputs move as float4.
  DF_CHECK(a.stride % 4 == 0 && uintptr_t(a.v) % 16 == 0 && uintptr_t(a.out) % 16 == 0);
  const unsigned chunks = blocks_of(a.n_tok, kChunk);
  const int prep_smem = int(sizeof(PrepSmem<S>)), scan_smem = int(sizeof(ScanSmem<S>));
  // Above the 48 KiB that a launch gets without asking (the attribute is per function and device: set every time).
  DF_CUDA_CHECK(cudaFuncSetAttribute(delta_chunk_prep_kernel<S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     prep_smem));
  DF_CUDA_CHECK(cudaFuncSetAttribute(delta_chunk_scan_kernel<S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     scan_smem));
  delta_chunk_prep_kernel<S><<<dim3(chunks, unsigned(a.n_v_heads)), kChunkThreads, prep_smem, a.stream>>>(
      a.q, a.k, a.stride, a.alpha, a.beta, a.dt_bias, a.a_scale, a.n_tok, a.n_k_heads, a.n_v_heads, a.work);
  DF_CUDA_CHECK_LAUNCH();
  delta_chunk_scan_kernel<S><<<dim3(S / kScanCols, unsigned(a.n_v_heads)), kChunkThreads, scan_smem, a.stream>>>(
      a.q, a.k, a.v, a.stride, a.work, a.state, a.out, a.n_tok, a.n_k_heads, a.n_v_heads);
  DF_CUDA_CHECK_LAUNCH();
}

// One run of tokens without a copy inside it.
void delta_rule_run(const GatedDeltaRuleArgs& a) {
  if (a.n_tok == 0) return;
  // A chunk costs about what kChunkMinTokens tokens one by one do.
  constexpr int64_t kChunkMinTokens = 16;
  if (a.work != nullptr && a.n_tok >= kChunkMinTokens) {
    a.head_dim == 64 ? chunked_delta_rule<64>(a) : chunked_delta_rule<128>(a);
    return;
  }
  const dim3 grid(unsigned(a.head_dim / kWarpsPerBlock), unsigned(a.n_v_heads));
  auto kernel = a.head_dim == 64 ? gated_delta_rule_kernel<64> : gated_delta_rule_kernel<128>;
  kernel<<<grid, kWarpsPerBlock * 32, 0, a.stream>>>(a.q, a.k, a.v, a.stride, a.alpha, a.beta, a.dt_bias, a.a_scale,
                                                     a.state, a.out, a.n_tok, a.n_k_heads, a.n_v_heads);
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void gated_delta_rule(const GatedDeltaRuleArgs& a) {
  DF_CHECK(a.q != nullptr && a.k != nullptr && a.v != nullptr && a.alpha != nullptr && a.beta != nullptr);
  DF_CHECK(a.dt_bias != nullptr && a.a_scale != nullptr && a.state != nullptr && a.out != nullptr);
  DF_CHECK(a.n_tok >= 0 && a.n_k_heads > 0 && a.n_v_heads > 0 && a.n_v_heads % a.n_k_heads == 0);
  DF_CHECK(a.n_v_heads <= 65535 && (a.head_dim == 64 || a.head_dim == 128));
  DF_CHECK(a.stride >= int64_t(a.n_v_heads) * a.head_dim);
  DF_CHECK(a.save == nullptr || (a.save_after > 0 && a.save_after < a.n_tok));
  if (a.save == nullptr) return delta_rule_run(a);
  // The copy between two runs: the state after the first save_after tokens.
  GatedDeltaRuleArgs first = a, rest = a;
  first.n_tok = a.save_after;
  delta_rule_run(first);
  const uint64_t state_bytes = uint64_t(a.n_v_heads) * a.head_dim * a.head_dim * 4;
  DF_CUDA_CHECK(cudaMemcpyAsync(a.save, a.state, state_bytes, cudaMemcpyDeviceToDevice, a.stream));
  const int64_t t = a.save_after;
  rest.q += t * a.stride, rest.k += t * a.stride, rest.v += t * a.stride;
  rest.alpha += t * a.n_v_heads, rest.beta += t * a.n_v_heads;
  rest.out += t * a.n_v_heads * a.head_dim;
  rest.n_tok = a.n_tok - t;
  delta_rule_run(rest);
}

}  // namespace df::cuda
