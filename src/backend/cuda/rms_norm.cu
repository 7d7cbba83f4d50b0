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

// The normed value of element x with the row's scale, the extra factor s and weight value w (where weighted).
__device__ __forceinline__ float rms_value(float x, float scale, float s, float w, bool weighted) {
  float v = __fmul_rn(x, scale);
  if (s != 1.0f) v = __fmul_rn(v, s);
  return weighted ? __fmul_rn(v, w) : v;
}

// What add_to's element a becomes: a + v, then scaled.
__device__ __forceinline__ float added(float a, float v, const float* then_scale) {
  return then_scale ? __fmul_rn(__fadd_rn(a, v), *then_scale) : __fadd_rn(a, v);
}

// A block per row. kPer > 0: a row of at most kPer * kThreads columns, each thread's elements (and their weights)
// loaded together before the scale's reduction, so that a decode step's norm waits for memory once rather than once
// per element in turn; the same squares summed in the same order as the loop (kPer 0) over longer rows.
template <int kPer>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const float* x, const float* __restrict__ weight, float* y,
                                                            int64_t cols, float eps, float s, float* add_to,
                                                            const float* then_scale) {
  dev::allow_next();
  const int64_t row = int64_t(blockIdx.x) * cols;
  float* yr = y ? y + row : nullptr;
  float* ar = add_to ? add_to + row : nullptr;
  if constexpr (kPer > 0) {
    float wv[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {  // the weights are the model's: read before the prior kernel ends
      const int64_t i = threadIdx.x + int64_t(k) * kThreads;
      wv[k] = weight && i < cols ? weight[i] : 1.0f;
    }
    dev::wait_prior();
    const float* xr = x + row;
    float xv[kPer], av[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * kThreads;
      xv[k] = i < cols ? xr[i] : 0.0f;
      av[k] = ar && i < cols ? ar[i] : 0.0f;
    }
    // Its barrier also orders every read above before the writes below where y or add_to is x.
    const float scale = dev::block_rms_scale<kThreads>(xv, cols, eps);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * kThreads;
      if (i >= cols) break;
      const float v = rms_value(xv[k], scale, s, wv[k], weight != nullptr);
      if (ar) ar[i] = added(av[k], v, then_scale);
      else yr[i] = v;
    }
  } else {
    dev::wait_prior();
    const float* xr = x + row;
    const float scale = dev::block_rms_scale<kThreads>(xr, cols, eps);
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
      const float v = rms_value(xr[i], scale, s, weight ? weight[i] : 1.0f, weight != nullptr);
      if (ar) ar[i] = added(ar[i], v, then_scale);
      else yr[i] = v;
    }
  }
}

// moe_post_norms for rows of at most kPostPer * kThreads columns: every row read once into registers.
constexpr int kPostPer = 16;

__global__ void __launch_bounds__(kThreads)
    moe_post_norms_kernel(const float* a, const float* __restrict__ wa, const float* b, const float* __restrict__ wb,
                          const float* __restrict__ w, float* x, int64_t cols, float eps, const float* then_scale) {
  dev::allow_next();
  float wav[kPostPer], wbv[kPostPer], wv[kPostPer];
#pragma unroll
  for (int k = 0; k < kPostPer; ++k) {  // the model's weights: read before the prior kernel ends
    const int64_t i = threadIdx.x + int64_t(k) * kThreads;
    const bool in = i < cols;
    wav[k] = in ? wa[i] : 0.0f, wbv[k] = in ? wb[i] : 0.0f, wv[k] = in ? w[i] : 0.0f;
  }
  dev::wait_prior();
  const int64_t row = int64_t(blockIdx.x) * cols;
  float av[kPostPer], bv[kPostPer], xv[kPostPer];
#pragma unroll
  for (int k = 0; k < kPostPer; ++k) {
    const int64_t i = threadIdx.x + int64_t(k) * kThreads;
    const bool in = i < cols;
    av[k] = in ? a[row + i] : 0.0f, bv[k] = in ? b[row + i] : 0.0f, xv[k] = in ? x[row + i] : 0.0f;
  }
  // Each reduction reuses block_rms_finish's shared sums: a barrier between two of them.
  const float sa = dev::block_rms_scale<kThreads>(av, cols, eps);
  __syncthreads();
  const float sb = dev::block_rms_scale<kThreads>(bv, cols, eps);
#pragma unroll
  for (int k = 0; k < kPostPer; ++k)
    av[k] = __fadd_rn(rms_value(av[k], sa, 1.0f, wav[k], true), rms_value(bv[k], sb, 1.0f, wbv[k], true));
  __syncthreads();
  const float ss = dev::block_rms_scale<kThreads>(av, cols, eps);
#pragma unroll
  for (int k = 0; k < kPostPer; ++k) {
    const int64_t i = threadIdx.x + int64_t(k) * kThreads;
    if (i >= cols) break;
    x[row + i] = added(xv[k], rms_value(av[k], ss, 1.0f, wv[k], true), then_scale);
  }
}

}  // namespace

void moe_post_norms(const PostNormsArgs& a) {
  DF_CHECK(a.a != nullptr && a.wa != nullptr && a.b != nullptr && a.wb != nullptr && a.w != nullptr);
  DF_CHECK(a.x != nullptr && a.x != a.a && a.x != a.b && a.a != a.b);
  DF_CHECK(a.n_rows >= 0 && a.n_rows <= 0x7fffffff && a.cols > 0);
  if (a.n_rows == 0) return;
  if (a.cols > int64_t(kPostPer) * kThreads) {  // the three launches, a normed and summed in place
    rms_norm({.x = a.a, .weight = a.wa, .y = a.a, .n_rows = a.n_rows, .cols = a.cols, .eps = a.eps,
              .stream = a.stream});
    rms_norm({.x = a.b, .weight = a.wb, .n_rows = a.n_rows, .cols = a.cols, .eps = a.eps, .stream = a.stream,
              .add_to = a.a});
    rms_norm({.x = a.a, .weight = a.w, .n_rows = a.n_rows, .cols = a.cols, .eps = a.eps, .stream = a.stream,
              .add_to = a.x, .then_scale = a.then_scale});
    return;
  }
  launch_early(moe_post_norms_kernel, dim3(unsigned(a.n_rows)), dim3(kThreads), 0, a.stream, a.a, a.wa, a.b, a.wb,
               a.w, a.x, a.cols, a.eps, a.then_scale);
}

void rms_norm(const RmsNormArgs& a) {
  DF_CHECK(a.x != nullptr && (a.y != nullptr || a.add_to != nullptr));
  DF_CHECK(a.then_scale == nullptr || a.add_to != nullptr);
  DF_CHECK(a.n_rows >= 0 && a.n_rows <= 0x7fffffff && a.cols > 0);
  if (a.n_rows == 0) return;
  const dim3 grid(unsigned(a.n_rows));
  if (a.cols <= 4 * kThreads)
    launch_early(rms_norm_kernel<4>, grid, dim3(kThreads), 0, a.stream, a.x, a.weight, a.y, a.cols, a.eps, a.scale,
                 a.add_to, a.then_scale);
  else if (a.cols <= 16 * kThreads)
    launch_early(rms_norm_kernel<16>, grid, dim3(kThreads), 0, a.stream, a.x, a.weight, a.y, a.cols, a.eps, a.scale,
                 a.add_to, a.then_scale);
  else
    launch_early(rms_norm_kernel<0>, grid, dim3(kThreads), 0, a.stream, a.x, a.weight, a.y, a.cols, a.eps, a.scale,
                 a.add_to, a.then_scale);
}

}  // namespace df::cuda
