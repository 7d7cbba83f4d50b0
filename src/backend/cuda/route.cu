// MoE routing and the weighted combine of the experts' outputs, as the CPU engine's moe_ffn computes them:
// softmax over all experts (sum in double), the top n_used by probability with ties going to the lower id (a stable
// sort), weights renormalized over the selected (sum in double, floored at 2^-14 as llama.cpp clamps it).
#include "backend/cuda/common.cuh"
#include "diskformer/backend/cuda/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

constexpr int kMaxExperts = 1024;
constexpr int kMaxUsed = 32;

// A warp per token; the probabilities live in shared memory.
__global__ void route_kernel(const float* __restrict__ logits, int n_expert, int n_used, bool norm_topk,
                             int32_t* __restrict__ ids, float* __restrict__ weights) {
  __shared__ float p[kMaxExperts];
  __shared__ float sel_p[kMaxUsed];
  __shared__ int sel_id[kMaxUsed];
  const int lane = threadIdx.x;
  const float* x = logits + int64_t(blockIdx.x) * n_expert;
  float mx = -INFINITY;
  for (int i = lane; i < n_expert; i += 32) mx = fmaxf(mx, x[i]);
  mx = dev::warp_max(mx);
  double sum = 0.0;
  for (int i = lane; i < n_expert; i += 32) {
    p[i] = expf(__fsub_rn(x[i], mx));
    sum += double(p[i]);
  }
  sum = dev::warp_sum(sum);
  const float inv = float(1.0 / sum);
  for (int i = lane; i < n_expert; i += 32) p[i] = __fmul_rn(p[i], inv);
  __syncwarp();

  for (int k = 0; k < n_used; ++k) {
    // Each lane's best in index order (strictly greater replaces, so the lowest index wins a tie), then the warp's.
    float bv = -INFINITY;
    int bi = n_expert;
    for (int i = lane; i < n_expert; i += 32)
      if (p[i] > bv) bv = p[i], bi = i;
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    if (bi >= n_expert) __trap();  // no finite probability left: NaN router logits
    if (lane == 0) {
      sel_p[k] = bv;
      sel_id[k] = bi;
      p[bi] = -INFINITY;  // taken
    }
    __syncwarp();
  }
  if (lane == 0) {
    double s = 0.0;
    for (int k = 0; k < n_used; ++k) s += double(sel_p[k]);
    const float fsum = fmaxf(float(s), 6.103515625e-5f);
    for (int k = 0; k < n_used; ++k) {
      ids[int64_t(blockIdx.x) * n_used + k] = sel_id[k];
      weights[int64_t(blockIdx.x) * n_used + k] = norm_topk ? __fdiv_rn(sel_p[k], fsum) : sel_p[k];
    }
  }
}

// A thread per (token, element): the slots added in routing order with separate roundings, as the CPU loop does.
__global__ void combine_kernel(const float* __restrict__ eo, const float* __restrict__ w, float* __restrict__ out,
                               int64_t n_tok, int64_t n_embd, int n_used) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_tok * n_embd) return;
  const int64_t t = idx / n_embd, i = idx % n_embd;
  const float* e = eo + t * n_used * n_embd + i;
  const float* wt = w + t * n_used;
  float acc = __fmul_rn(e[0], wt[0]);
  for (int k = 1; k < n_used; ++k) acc = __fadd_rn(acc, __fmul_rn(e[int64_t(k) * n_embd], wt[k]));
  out[idx] = acc;
}

}  // namespace

void route(const RouteArgs& a) {
  DF_CHECK(a.logits != nullptr && a.ids != nullptr && a.weights != nullptr);
  DF_CHECK(a.n_expert > 0 && a.n_expert <= kMaxExperts && a.n_used > 0 && a.n_used <= kMaxUsed);
  DF_CHECK(a.n_used <= a.n_expert && a.n_tok >= 0 && a.n_tok <= 0x7fffffff);
  if (a.n_tok == 0) return;
  route_kernel<<<unsigned(a.n_tok), 32, 0, a.stream>>>(a.logits, a.n_expert, a.n_used, a.norm_topk, a.ids, a.weights);
  DF_CUDA_CHECK_LAUNCH();
}

void moe_combine(const MoeCombineArgs& a) {
  DF_CHECK(a.expert_out != nullptr && a.weights != nullptr && a.out != nullptr);
  DF_CHECK(a.n_tok >= 0 && a.n_embd > 0 && a.n_used > 0);
  const int64_t n = a.n_tok * a.n_embd;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t grid = (n + kThreads - 1) / kThreads;
  DF_CHECK(grid <= 0x7fffffff);
  combine_kernel<<<unsigned(grid), kThreads, 0, a.stream>>>(a.expert_out, a.weights, a.out, a.n_tok, a.n_embd,
                                                            a.n_used);
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
