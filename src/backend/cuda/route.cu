// MoE routing and the weighted combine of the experts' outputs, as the CPU engine's moe_ffn computes them:
// softmax over all experts (sum in double), the top n_used by probability with ties going to the lower id (a stable
// sort), weights renormalized over the selected (sum in double, floored at 2^-14 as llama.cpp clamps it).
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

constexpr int kMaxExperts = 1024;
constexpr int kMaxUsed = 32;

// A block per token, a thread per expert (blockDim = n_expert rounded up to whole warps). The top n_used come from
// ranks, not from n_used rounds of block-wide arg-max: expert i's place in the CPU's stable descending sort is the
// number of experts with a larger probability plus those with an equal one and a lower id, so the experts ranked
// below n_used are the selection, in order, with exactly the CPU's tie rule.
__global__ void __launch_bounds__(kMaxExperts) route_kernel(const float* __restrict__ logits, int n_expert, int n_used,
                                                            bool norm_topk, int32_t* __restrict__ ids,
                                                            float* __restrict__ weights,
                                                            const float* __restrict__ expert_scale) {
  dev::allow_next();
  dev::wait_prior();
  __shared__ float p[kMaxExperts];
  __shared__ float sel_p[kMaxUsed];
  __shared__ int sel_id[kMaxUsed];
  __shared__ float warp_mx[kMaxExperts / 32];
  __shared__ double warp_tot[kMaxExperts / 32];
  const int i = threadIdx.x, lane = i % 32, warp = i / 32, n_warps = blockDim.x / 32;
  const bool mine = i < n_expert;
  const float xi = mine ? logits[int64_t(blockIdx.x) * n_expert + i] : -INFINITY;
  const float wmx = dev::warp_max(xi);
  if (lane == 0) warp_mx[warp] = wmx;
  __syncthreads();
  float mx = warp_mx[0];
  for (int w = 1; w < n_warps; ++w) mx = fmaxf(mx, warp_mx[w]);
  const float e = mine ? expf(__fsub_rn(xi, mx)) : 0.0f;
  const double ws = dev::warp_sum(double(e));
  if (lane == 0) warp_tot[warp] = ws;
  __syncthreads();
  double sum = warp_tot[0];
  for (int w = 1; w < n_warps; ++w) sum += warp_tot[w];
  const float inv = float(1.0 / sum);
  const float pi = __fmul_rn(e, inv);
  if (mine) {
    if (isnan(pi)) __trap();  // NaN router logits: no ranking exists
    p[i] = pi;
  }
  __syncthreads();
  if (mine) {
    int rank = 0;
    for (int j = 0; j < n_expert; ++j) {
      const float pj = p[j];
      rank += pj > pi || (pj == pi && j < i);
    }
    if (rank < n_used) {
      sel_p[rank] = pi;
      sel_id[rank] = i;
    }
  }
  __syncthreads();
  if (i < n_used) {  // every writer sums in the same order, so all hold the same total
    double s = 0.0;
    for (int k = 0; k < n_used; ++k) s += double(sel_p[k]);
    const float fsum = fmaxf(float(s), 6.103515625e-5f);
    ids[int64_t(blockIdx.x) * n_used + i] = sel_id[i];
    const float w = norm_topk ? __fdiv_rn(sel_p[i], fsum) : sel_p[i];
    weights[int64_t(blockIdx.x) * n_used + i] = expert_scale ? __fmul_rn(w, expert_scale[sel_id[i]]) : w;
  }
}

// A thread per (token, element): the slots added in routing order with separate roundings, as the CPU loop does.
__global__ void combine_kernel(const float* __restrict__ eo, const float* __restrict__ w, float* __restrict__ out,
                               int64_t n_tok, int64_t n_embd, int n_used, bool accumulate) {
  dev::allow_next();
  dev::wait_prior();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_tok * n_embd) return;
  const int64_t t = idx / n_embd, i = idx % n_embd;
  const float* e = eo + t * n_used * n_embd + i;
  const float* wt = w + t * n_used;
  float acc = __fmul_rn(e[0], wt[0]);
  for (int k = 1; k < n_used; ++k) acc = __fadd_rn(acc, __fmul_rn(e[int64_t(k) * n_embd], wt[k]));
  out[idx] = accumulate ? __fadd_rn(out[idx], acc) : acc;
}

}  // namespace

void route(const RouteArgs& a) {
  DF_CHECK(a.logits != nullptr && a.ids != nullptr && a.weights != nullptr);
  DF_CHECK(a.n_expert > 0 && a.n_expert <= kMaxExperts && a.n_used > 0 && a.n_used <= kMaxUsed);
  DF_CHECK(a.n_used <= a.n_expert && a.n_tok >= 0 && a.n_tok <= 0x7fffffff);
  if (a.n_tok == 0) return;
  const unsigned threads = unsigned((a.n_expert + 31) / 32 * 32);
  launch_early(route_kernel, dim3(unsigned(a.n_tok)), dim3(threads), 0, a.stream, static_cast<const float*>(a.logits),
               a.n_expert, a.n_used, a.norm_topk, a.ids, a.weights, a.expert_scale);
}

void moe_combine(const MoeCombineArgs& a) {
  DF_CHECK(a.expert_out != nullptr && a.weights != nullptr && a.out != nullptr);
  DF_CHECK(a.n_tok >= 0 && a.n_embd > 0 && a.n_used > 0);
  const int64_t n = a.n_tok * a.n_embd;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t grid = (n + kThreads - 1) / kThreads;
  DF_CHECK(grid <= 0x7fffffff);
  launch_early(combine_kernel, dim3(unsigned(grid)), dim3(kThreads), 0, a.stream, a.expert_out, a.weights, a.out,
               a.n_tok, a.n_embd, a.n_used, a.accumulate);
}

}  // namespace df::cuda
