// Causal attention over an f16 KV cache with GQA, following cpu::attention (ggml's CPU flash attention): q rounded
// to f16, f32 scores, an online softmax whose value accumulator is rounded to f16 after every update.
// A block per (token, head). The keys go in chunks: the block's warps score a chunk in parallel into shared memory
// and stage its value rows there, then each thread walks the chunk in position order for its value dimensions, so
// the f16 accumulator sees the same sequence of updates as on the CPU; only the score's dot product sums in a
// different order.
#include "backend/cuda/common.cuh"
#include "diskformer/backend/cuda/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxHead = 256;
constexpr int kChunk = 64;  // positions scored (and their values staged in shared memory) per round
constexpr int kDimsPerThread = kMaxHead / kThreads;

__global__ void __launch_bounds__(kThreads)
    attention_kernel(const float* __restrict__ q, const uint16_t* __restrict__ kc, const uint16_t* __restrict__ vc,
                     float* __restrict__ out, const int32_t* __restrict__ pos, int n_head, int n_head_kv, int hk,
                     int hv, float scale) {
  const int h = blockIdx.x, t = blockIdx.y;
  const int g = h / (n_head / n_head_kv);
  const int64_t kv_k = int64_t(n_head_kv) * hk, kv_v = int64_t(n_head_kv) * hv;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __shared__ float q16[kMaxHead];
  __shared__ float scores[kChunk];
  // The chunk's value rows of this KV head, so the position-ordered walk reads shared memory, not global.
  __shared__ uint16_t v_sh[kChunk * kMaxHead];
  const float* qh = q + (int64_t(t) * n_head + h) * hk;
  for (int i = threadIdx.x; i < hk; i += kThreads) q16[i] = dev::round_f16(qh[i]);
  const int64_t last = pos[t];  // causal: keys 0 .. last

  float acc[kDimsPerThread];  // f16 values held as floats
#pragma unroll
  for (int d = 0; d < kDimsPerThread; ++d) acc[d] = 0.0f;
  float m = -INFINITY, s_sum = 0.0f;

  for (int64_t c0 = 0; c0 <= last; c0 += kChunk) {
    const int n_c = int(min(int64_t(kChunk), last + 1 - c0));
    __syncthreads();  // q16 written; the previous chunk's scores consumed
    for (int j = warp; j < n_c; j += kThreads / 32) {
      const uint16_t* kr = kc + (c0 + j) * kv_k + int64_t(g) * hk;
      float s = 0.0f;
      for (int i = lane; i < hk; i += 32) s = fmaf(dev::f16_to_f32(kr[i]), q16[i], s);
      s = dev::warp_sum(s);
      if (lane == 0) scores[j] = __fmul_rn(s, scale);
    }
    for (int idx = threadIdx.x; idx < n_c * hv; idx += kThreads) {
      const int j = idx / hv, i = idx % hv;
      v_sh[j * hv + i] = vc[(c0 + j) * kv_v + int64_t(g) * hv + i];
    }
    __syncthreads();
    for (int j = 0; j < n_c; ++j) {
      const float s = scores[j];
      float ms = 1.0f, vs = 1.0f;
      if (s > m) {
        const float m_old = m;
        m = s;
        ms = expf(m_old - m);
#pragma unroll
        for (int d = 0; d < kDimsPerThread; ++d) acc[d] = dev::round_f16(__fmul_rn(acc[d], ms));
      } else {
        vs = expf(s - m);
      }
      const uint16_t* vr = v_sh + j * hv;
#pragma unroll
      for (int d = 0; d < kDimsPerThread; ++d) {
        const int i = threadIdx.x + d * kThreads;
        if (i < hv) acc[d] = dev::round_f16(fmaf(dev::f16_to_f32(vr[i]), vs, acc[d]));
      }
      s_sum = __fadd_rn(__fmul_rn(s_sum, ms), vs);
    }
  }
  const float inv = s_sum == 0.0f ? 0.0f : 1.0f / s_sum;
  float* o = out + (int64_t(t) * n_head + h) * hv;
#pragma unroll
  for (int d = 0; d < kDimsPerThread; ++d) {
    const int i = threadIdx.x + d * kThreads;
    if (i < hv) o[i] = __fmul_rn(acc[d], inv);
  }
}

}  // namespace

void attention(const AttentionArgs& a) {
  DF_CHECK(a.q != nullptr && a.k != nullptr && a.v != nullptr && a.out != nullptr && a.pos != nullptr);
  DF_CHECK(a.n_head > 0 && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0);
  DF_CHECK(a.head_dim_k > 0 && a.head_dim_k <= kMaxHead && a.head_dim_v > 0 && a.head_dim_v <= kMaxHead);
  DF_CHECK(a.n_tok >= 0 && a.n_tok <= 65535 && a.n_head <= 0x7fffffff);
  if (a.n_tok == 0) return;
  const dim3 grid{unsigned(a.n_head), unsigned(a.n_tok)};
  attention_kernel<<<grid, kThreads, 0, a.stream>>>(a.q, a.k, a.v, a.out, a.pos, a.n_head, a.n_head_kv, a.head_dim_k,
                                                    a.head_dim_v, a.scale);
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
