// RoPE from a table of (cos, sin) per position and pair computed on the host as cpu::rope computes them, so the
// rotation is bit for bit the CPU's; positions are read on the device (a decode graph replays with new positions).
#include <cmath>

#include "backend/cuda/common.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

// A thread per (token, head, pair).
__global__ void rope_kernel(float* x, int64_t n_tok, int n_heads, int head_dim, int n_rot,
                            const int32_t* __restrict__ pos, const float* __restrict__ table, int64_t n_pos,
                            bool neox) {
  const int half = n_rot / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_tok * n_heads * half) return;
  const int i = int(idx % half);
  const int64_t th = idx / half;  // token * n_heads + head
  const int64_t t = th / n_heads;
  const int32_t p = pos[t];
  if (p < 0 || p >= n_pos) __trap();  // position outside the table: a bug of the caller
  const float c = table[(int64_t(p) * half + i) * 2], s = table[(int64_t(p) * half + i) * 2 + 1];
  float* xh = x + th * head_dim;
  const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
  const float x0 = xh[ia], x1 = xh[ib];
  // As cpu::rope rounds (llama.cpp's build fuses the first product of each expression with the sum).
  xh[ia] = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
  xh[ib] = __fmaf_rn(x0, s, __fmul_rn(x1, c));
}

}  // namespace

std::vector<float> rope_table(int64_t n_pos, int n_rot, float base, const float* freq_factors) {
  DF_CHECK(n_pos >= 0 && n_rot > 0 && n_rot % 2 == 0);
  const int half = n_rot / 2;
  std::vector<float> t(uint64_t(n_pos) * half * 2);
  const float theta_scale = std::pow(base, -2.0f / float(n_rot));
  for (int64_t p = 0; p < n_pos; ++p) {
    float theta = float(p);
    for (int i = 0; i < half; ++i) {
      const float a = freq_factors ? theta / freq_factors[i] : theta;
      t[(p * half + i) * 2] = std::cos(a);
      t[(p * half + i) * 2 + 1] = std::sin(a);
      theta *= theta_scale;
    }
  }
  return t;
}

void rope(const RopeArgs& a) {
  DF_CHECK(a.x != nullptr && a.pos != nullptr && a.table != nullptr);
  DF_CHECK(a.n_tok >= 0 && a.n_heads > 0 && a.n_rot > 0 && a.n_rot % 2 == 0 && a.n_rot <= a.head_dim);
  DF_CHECK(a.n_pos > 0);
  const int64_t n = a.n_tok * a.n_heads * (a.n_rot / 2);
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t grid = (n + kThreads - 1) / kThreads;
  DF_CHECK(grid <= 0x7fffffff);
  rope_kernel<<<unsigned(grid), kThreads, 0, a.stream>>>(a.x, a.n_tok, a.n_heads, a.head_dim, a.n_rot, a.pos, a.table,
                                                         a.n_pos, a.style == model::RopeStyle::kNeox);
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
