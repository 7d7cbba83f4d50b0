// RMSNorm, a block per row: the square sum in double as cpu::rms_norm takes it (float squares, double sum), so the
// scale rounds to the same float except in rare ties of the double sum's order.
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rms.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const float* x, const float* __restrict__ weight, float* y,
                                                            int64_t cols, float eps, float s, float* add_to,
                                                            const float* then_scale) {
  dev::allow_next();
  dev::wait_prior();
  const float* xr = x + int64_t(blockIdx.x) * cols;
  float* yr = y ? y + int64_t(blockIdx.x) * cols : nullptr;
  const float scale = dev::block_rms_scale<kThreads>(xr, cols, eps);
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    float v = __fmul_rn(xr[i], scale);
    if (s != 1.0f) v = __fmul_rn(v, s);
    if (weight) v = __fmul_rn(v, weight[i]);
    if (add_to == nullptr) {
      yr[i] = v;
      continue;
    }
    float& a = add_to[int64_t(blockIdx.x) * cols + i];
    a = then_scale ? __fmul_rn(__fadd_rn(a, v), *then_scale) : __fadd_rn(a, v);
  }
}

}  // namespace

void rms_norm(const RmsNormArgs& a) {
  DF_CHECK(a.x != nullptr && (a.y != nullptr || a.add_to != nullptr));
  DF_CHECK(a.then_scale == nullptr || a.add_to != nullptr);
  DF_CHECK(a.n_rows >= 0 && a.n_rows <= 0x7fffffff && a.cols > 0);
  if (a.n_rows == 0) return;
  launch_early(rms_norm_kernel, dim3(unsigned(a.n_rows)), dim3(kThreads), 0, a.stream, a.x, a.weight, a.y, a.cols,
               a.eps, a.scale, a.add_to, a.then_scale);
}

}  // namespace df::cuda
