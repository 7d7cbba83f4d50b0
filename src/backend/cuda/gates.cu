// The sigmoid gates of a hybrid model's attention layers (each head's query rows carry its gate) and of its shared
// expert, one thread per element, each step rounded as the CPU forward rounds it (backend/cpu/forward_qwen35.cpp).
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/cudart/check.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) { return cuda::grid_for(n, kThreads); }

__device__ __forceinline__ float sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }

// Element i of q [n_tok * n_head][D] is element i % D of row i / D's first half in q_gate [n_tok * n_head][2][D].
__global__ void split_query_kernel(const float* __restrict__ q_gate, float* __restrict__ q, int64_t n, int D) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) q[i] = q_gate[(i / D) * 2 * D + i % D];
}

__global__ void sigmoid_gate_kernel(float* x, const float* __restrict__ q_gate, int64_t n, int D) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fmul_rn(x[i], sigmoid(q_gate[(i / D) * 2 * D + D + i % D]));
}

__global__ void add_sigmoid_scaled_kernel(float* x, const float* __restrict__ y, const float* __restrict__ logit,
                                          int64_t total, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) x[i] = __fadd_rn(x[i], __fmul_rn(y[i], sigmoid(logit[i / n])));
}

}  // namespace

void split_query(const SplitQueryArgs& a) {
  DF_CHECK(a.q_gate != nullptr && a.q != nullptr && a.n_tok >= 0 && a.n_head > 0 && a.head_dim > 0);
  const int64_t n = a.n_tok * a.n_head * a.head_dim;
  if (n == 0) return;
  split_query_kernel<<<grid_for(n), kThreads, 0, a.stream>>>(a.q_gate, a.q, n, a.head_dim);
  DF_CUDA_CHECK_LAUNCH();
}

void sigmoid_gate(const SigmoidGateArgs& a) {
  DF_CHECK(a.x != nullptr && a.q_gate != nullptr && a.n_tok >= 0 && a.n_head > 0 && a.head_dim > 0);
  const int64_t n = a.n_tok * a.n_head * a.head_dim;
  if (n == 0) return;
  sigmoid_gate_kernel<<<grid_for(n), kThreads, 0, a.stream>>>(a.x, a.q_gate, n, a.head_dim);
  DF_CUDA_CHECK_LAUNCH();
}

void add_sigmoid_scaled(const AddSigmoidScaledArgs& a) {
  DF_CHECK(a.x != nullptr && a.y != nullptr && a.logit != nullptr && a.n_tok >= 0 && a.n > 0);
  const int64_t total = a.n_tok * a.n;
  if (total == 0) return;
  add_sigmoid_scaled_kernel<<<grid_for(total), kThreads, 0, a.stream>>>(a.x, a.y, a.logit, total, a.n);
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
