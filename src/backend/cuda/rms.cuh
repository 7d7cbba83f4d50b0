// The RMSNorm scale of one row computed by a block of kThreads threads, shared by rms_norm and the fused decode
// kernels so that they sum the squares in the same order: float squares, a double sum per thread over a stride of
// kThreads, warp butterflies, then the warps' sums in order.
#pragma once

#include "backend/cuda/common.cuh"

namespace df::cuda::dev {

// The block's reduction of the threads' square sums, then 1 / sqrt(mean + eps). Every thread calls it (one barrier).
template <int kThreads>
__device__ __forceinline__ float block_rms_finish(double sum, int64_t cols, float eps) {
  __shared__ double warp_sums[kThreads / 32];
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();  // also orders every read of x before later writes when the output aliases it
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  const float mean = float(total / double(cols));
  return 1.0f / sqrtf(mean + eps);
}

// Every thread of the block must call it (it synchronizes the block once); returns 1 / sqrt(mean(x^2) + eps).
template <int kThreads>
__device__ __forceinline__ float block_rms_scale(const float* xr, int64_t cols, float eps) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) sum += double(__fmul_rn(xr[i], xr[i]));
  return block_rms_finish<kThreads>(sum, cols, eps);
}

// The same from the values a thread holds already: v[k] = x[threadIdx.x + k * kThreads], for a row of at most
// N * kThreads columns (the same squares summed in the same order).
template <int kThreads, int N>
__device__ __forceinline__ float block_rms_scale(const float (&v)[N], int64_t cols, float eps) {
  double sum = 0.0;
#pragma unroll
  for (int k = 0; k < N; ++k)
    if (threadIdx.x + int64_t(k) * kThreads < cols) sum += double(__fmul_rn(v[k], v[k]));
  return block_rms_finish<kThreads>(sum, cols, eps);
}

// One row's RMSNorm by a block of kThreads threads, rms_norm_q8's operations: thread i holds columns
// i + k * kThreads of each chunk of 8 * kThreads (lane i % 32's elements of 32-blocks i / 32 + k * kThreads / 32),
// and emit(v, col) takes each normed value, the 32 lanes of a warp together for one 32-block (so that it may quantize
// the block with shuffles). The first chunk's loads go out before the scale's reduction waits; a row of up to
// 8 * kThreads columns is read once. Every thread of the block calls it (one barrier; a caller that calls it again
// synchronizes in between, as the shared sums are reused).
template <int kThreads, typename Emit>
__device__ __forceinline__ void rms_norm_row(const float* __restrict__ xr, const float* __restrict__ weight,
                                             int64_t cols, float eps, Emit&& emit) {
  constexpr int kPer = 8;
  float xv[kPer], wv[kPer];
  auto load = [&](int64_t i0) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t i = i0 + threadIdx.x + int64_t(k) * kThreads;
      if (i < cols) xv[k] = xr[i], wv[k] = weight[i];
    }
  };
  load(0);
  const float scale = cols <= int64_t(kPer) * kThreads ? block_rms_scale<kThreads>(xv, cols, eps)
                                                       : block_rms_scale<kThreads>(xr, cols, eps);
  for (int64_t i0 = 0; i0 < cols; i0 += int64_t(kPer) * kThreads) {
    if (i0 > 0) load(i0);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t i = i0 + threadIdx.x + int64_t(k) * kThreads;
      if (i >= cols) break;  // the whole warp: cols is a multiple of 32
      emit(__fmul_rn(__fmul_rn(xv[k], scale), wv[k]), i);
    }
  }
}

// Q8_0 of one block of 32 values, one per lane (v), written to yb (34 bytes): bit for bit as quantize_q8_0.
__device__ __forceinline__ void quantize_block_q8_0(float v, uint8_t* yb, int lane) {
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  if (lane == 0) *reinterpret_cast<uint16_t*>(yb) = f32_to_f16(d);
  yb[2 + lane] = uint8_t(int8_t(rintf(v * id)));
}

}  // namespace df::cuda::dev
