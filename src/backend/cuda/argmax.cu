// Greedy token selection on the GPU: a block per row, the first index of the maximum (the CPU sampler's argmax).
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi) {
  return v > bv || (v == bv && i < bi);
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* __restrict__ x, int64_t n, int32_t* out) {
  dev::allow_next();
  dev::wait_prior();
  const float* r = x + int64_t(blockIdx.x) * n;
  float bv = -INFINITY;
  int64_t bi = n;
  // kBatch of a thread's elements loaded before any is compared: a vocabulary of 152k is 10 round trips to memory
  // a thread, not 150. Each thread still sees its elements in index order.
  constexpr int kBatch = 16;
  for (int64_t i0 = threadIdx.x; i0 < n; i0 += int64_t(kBatch) * kThreads) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t i = i0 + int64_t(u) * kThreads;
      v[u] = i < n ? r[i] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t i = i0 + int64_t(u) * kThreads;
      if (i < n && (v[u] > bv || (bi == n && v[u] == bv))) bv = v[u], bi = i;  // the first of equals stays
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  __shared__ float sv[kThreads / 32];
  __shared__ int64_t si[kThreads / 32];
  if (threadIdx.x % 32 == 0) sv[threadIdx.x / 32] = bv, si[threadIdx.x / 32] = bi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w)
      if (better(sv[w], si[w], bv, bi)) bv = sv[w], bi = si[w];
    // All NaN or -inf: the CPU argmax returns 0 when nothing beats the first element.
    out[blockIdx.x] = int32_t(bi >= n ? 0 : bi);
  }
}

}  // namespace

void argmax(const ArgmaxArgs& a) {
  DF_CHECK(a.x != nullptr && a.out != nullptr && a.n > 0 && a.n <= 0x7fffffff);
  DF_CHECK(a.n_rows >= 0 && a.n_rows <= 0x7fffffff);
  if (a.n_rows == 0) return;
  launch_early(argmax_kernel, dim3(unsigned(a.n_rows)), dim3(kThreads), 0, a.stream, static_cast<const float*>(a.x),
               a.n, a.out);
}

}  // namespace df::cuda
