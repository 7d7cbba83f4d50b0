// RMSNorm, a block per row: the square sum in double as cpu::rms_norm takes it (float squares, double sum), so the
// scale rounds to the same float except in rare ties of the double sum's order.
#include "backend/cuda/common.cuh"
#include "diskformer/backend/cuda/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const float* x, const float* __restrict__ weight, float* y,
                                                            int64_t cols, float eps) {
  const float* xr = x + int64_t(blockIdx.x) * cols;
  float* yr = y + int64_t(blockIdx.x) * cols;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) sum += double(__fmul_rn(xr[i], xr[i]));
  __shared__ double warp_sums[kThreads / 32];
  sum = dev::warp_sum(sum);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();  // also orders every read of x before the writes of y when they alias
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  const float mean = float(total / double(cols));
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), weight[i]);
}

}  // namespace

void rms_norm(const RmsNormArgs& a) {
  DF_CHECK(a.x != nullptr && a.weight != nullptr && a.y != nullptr);
  DF_CHECK(a.n_rows >= 0 && a.n_rows <= 0x7fffffff && a.cols > 0);
  if (a.n_rows == 0) return;
  rms_norm_kernel<<<unsigned(a.n_rows), kThreads, 0, a.stream>>>(a.x, a.weight, a.y, a.cols, a.eps);
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
