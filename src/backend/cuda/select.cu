// Repeat penalty and exact top-k selection for the sampler (select.h).
#include <algorithm>

#include "diskformer/cudart/check.h"
#include "diskformer/backend/cuda/select.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

__global__ void repeat_penalty_kernel(const float* __restrict__ x, float* __restrict__ out,
                                      const int32_t* __restrict__ ids, int64_t n_ids, float penalty) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_ids) return;
  const int32_t id = ids[i];
  const float l = x[id];
  // _rn: IEEE round-to-nearest whatever the compiler flags, as the host's l / p and l * p.
  out[id] = l > 0.0f ? __fdiv_rn(l, penalty) : __fmul_rn(l, penalty);
}

__global__ void ban_kernel(float* __restrict__ x, const int32_t* __restrict__ ids, int64_t n_ids) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n_ids) x[ids[i]] = -INFINITY;
}

constexpr int kTieThreads = 1024;  // the ordered pass over a tie at the k-th place: one block
constexpr int kTieWarps = kTieThreads / 32;
constexpr int kThreads = 256;      // the counting and gathering passes: blocks over the whole row
constexpr int kUnroll = 8;         // logits a thread loads before it counts any
constexpr int kPasses = 4;         // digits of 8 bits, from the top

// Unsigned keys in the order of the floats: a > b exactly when key(a) > key(b) for numbers, -0 == +0, NaN lowest.
__device__ __forceinline__ uint32_t order_key(float f) {
  if (f != f) return 0u;
  const uint32_t u = f == 0.0f ? 0u : __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The selection's state in the caller's work bytes (top_k_work_bytes): a histogram per pass, then after pass p the
// bits known so far of the k-th largest key (prefix[p + 1]) and how many keys sharing them still belong to the k
// best (rem[p + 1]; rem[0] is unused, k being the first pass's), the count of keys equal to it, and the gather's two
// slot counters.
struct TopKWork {
  uint32_t hist[kPasses][256];
  uint32_t prefix[kPasses + 1], rem[kPasses + 1];
  uint32_t n_eq, n_gt_taken, n_eq_taken;
};

// The logits of one round of a block-strided pass: kUnroll of them a thread, all loaded before any is used (NaN,
// the lowest key, past the end).
__device__ __forceinline__ void load_round(const float* __restrict__ x, int64_t n, int64_t base, float (&v)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + int64_t(u) * kThreads + threadIdx.x;
    v[u] = i < n ? x[i] : __int_as_float(0x7fc00000);
  }
}

// Pass p's digit counts of the keys that share the prefix found so far: each block counts its share of the row in
// shared memory, then adds its bins into the pass's histogram.
__global__ void __launch_bounds__(kThreads) top_k_count_kernel(const float* __restrict__ x, int64_t n,
                                                               TopKWork* __restrict__ w, int pass) {
  __shared__ uint32_t hist[256];
  const int lane = threadIdx.x % 32;
  hist[threadIdx.x] = 0;
  __syncthreads();
  const int shift = 24 - 8 * pass;
  const uint32_t prefix = w->prefix[pass], mask = pass == 0 ? 0u : ~0u << (shift + 8);
  const int64_t step = int64_t(gridDim.x) * kThreads * kUnroll;
  // Uniform trip count within a warp: the votes below need every lane.
  for (int64_t base = int64_t(blockIdx.x) * kThreads * kUnroll; base < n; base += step) {
    float v[kUnroll];
    load_round(x, n, base, v);
    uint32_t bins[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t key = order_key(v[u]);
      const bool counted = base + int64_t(u) * kThreads + threadIdx.x < n && (key & mask) == prefix;
      bins[u] = counted ? (key >> shift) & 255u : 256;  // 256: not counted
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      // After the first pass few keys still share the prefix: a warp with none skips the slow match below.
      if (!__any_sync(0xffffffffu, bins[u] < 256)) continue;
      // Logits crowd into a few bins: one shared atomic per distinct bin per warp instead of one per lane.
      const uint32_t peers = __match_any_sync(0xffffffffu, bins[u]);
      if (bins[u] < 256 && lane == __ffs(peers) - 1) atomicAdd(&hist[bins[u]], uint32_t(__popc(peers)));
    }
  }
  __syncthreads();
  if (hist[threadIdx.x] != 0) atomicAdd(&w->hist[pass][threadIdx.x], hist[threadIdx.x]);
}

// The digit d of pass p where the count of keys above reaches rem (sum(hist) >= rem, so d = 0 at the latest).
__global__ void top_k_digit_kernel(TopKWork* __restrict__ w, int pass, uint32_t k) {
  const uint32_t* hist = w->hist[pass];
  const uint32_t rem = pass == 0 ? k : w->rem[pass];
  uint32_t above = 0;
  int d = 255;
  for (; d > 0; --d) {
    if (above + hist[d] >= rem) break;
    above += hist[d];
  }
  w->prefix[pass + 1] = w->prefix[pass] | (uint32_t(d) << (24 - 8 * pass));
  w->rem[pass + 1] = rem - above;
  if (pass == kPasses - 1) w->n_eq = hist[d];  // the last digit: the keys equal to the k-th largest
}

// The winners: every key above the k-th largest T, and where every key equal to T wins (no tie straddles the k-th
// place, the usual case) those too, each to a slot of its own, in any order.
__global__ void __launch_bounds__(kThreads) top_k_gather_kernel(const float* __restrict__ x, int64_t n, uint32_t k,
                                                                TopKWork* __restrict__ w, float* __restrict__ out_v,
                                                                int32_t* __restrict__ out_i) {
  const uint32_t T = w->prefix[kPasses], rem = w->rem[kPasses], n_gt = k - rem;
  const bool all_eq = w->n_eq == rem;
  const int64_t step = int64_t(gridDim.x) * kThreads * kUnroll;
  for (int64_t base = int64_t(blockIdx.x) * kThreads * kUnroll; base < n; base += step) {
    float v[kUnroll];
    load_round(x, n, base, v);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kThreads + threadIdx.x;
      if (i >= n) continue;
      const uint32_t key = order_key(v[u]);
      uint32_t slot = k;
      if (key > T) slot = atomicAdd(&w->n_gt_taken, 1u);  // < n_gt: exactly n_gt keys are above T
      else if (key == T && all_eq) slot = n_gt + atomicAdd(&w->n_eq_taken, 1u);
      if (slot < k) {
        out_v[slot] = v[u];
        out_i[slot] = int32_t(i);
      }
    }
  }
}

// A tie across the k-th place: of the keys equal to T the rem with the lowest indices win (the host sort breaks ties
// by index, so partial_sort keeps those), found in index order, chunk by chunk, until rem are taken.
__global__ void __launch_bounds__(kTieThreads) top_k_tie_kernel(const float* __restrict__ x, int64_t n, uint32_t k,
                                                                const TopKWork* __restrict__ w,
                                                                float* __restrict__ out_v, int32_t* __restrict__ out_i) {
  __shared__ uint32_t s_warp[kTieWarps];
  const uint32_t T = w->prefix[kPasses], rem = w->rem[kPasses], n_gt = k - rem;
  if (w->n_eq == rem) return;  // the gather took them all
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t eq_seen = 0;  // keys equal to T in earlier chunks, the same in every thread
  for (int64_t base = 0; base < n; base += kTieThreads) {
    const int64_t i = base + threadIdx.x;
    const float v = i < n ? x[i] : 0.0f;
    const bool eq = i < n && order_key(v) == T;
    const uint32_t ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) s_warp[warp] = uint32_t(__popc(ballot));
    __syncthreads();
    uint32_t before = eq_seen + uint32_t(__popc(ballot & ((1u << lane) - 1u))), chunk = 0;
    for (int w2 = 0; w2 < kTieWarps; ++w2) {
      if (w2 < warp) before += s_warp[w2];
      chunk += s_warp[w2];
    }
    if (eq && before < rem) {
      out_v[n_gt + before] = v;
      out_i[n_gt + before] = int32_t(i);
    }
    eq_seen += chunk;
    const bool done = eq_seen >= rem;  // the same in every thread
    __syncthreads();
    if (done) break;
  }
}

}  // namespace

void repeat_penalty(const RepeatPenaltyArgs& a) {
  DF_CHECK(a.x != nullptr && a.out != nullptr && a.x != a.out && a.n > 0 && a.n_ids >= 0);
  DF_CHECK(a.n_ids == 0 || a.ids != nullptr);
  DF_CUDA_CHECK(cudaMemcpyAsync(a.out, a.x, uint64_t(a.n) * sizeof(float), cudaMemcpyDeviceToDevice, a.stream));
  if (a.n_ids == 0) return;
  const int threads = 256;
  repeat_penalty_kernel<<<unsigned((a.n_ids + threads - 1) / threads), threads, 0, a.stream>>>(a.x, a.out, a.ids,
                                                                                               a.n_ids, a.penalty);
  DF_CUDA_CHECK_LAUNCH();
}

void ban_tokens(const BanArgs& a) {
  DF_CHECK(a.x != nullptr && a.n > 0 && a.n_ids >= 0);
  if (a.n_ids == 0) return;
  DF_CHECK(a.ids != nullptr);
  const int threads = 256;
  ban_kernel<<<unsigned((a.n_ids + threads - 1) / threads), threads, 0, a.stream>>>(a.x, a.ids, a.n_ids);
  DF_CUDA_CHECK_LAUNCH();
}

uint64_t top_k_work_bytes() { return sizeof(TopKWork); }

void top_k(const TopKArgs& a) {
  DF_CHECK(a.x != nullptr && a.values != nullptr && a.ids != nullptr && a.work != nullptr);
  DF_CHECK(a.n > 0 && a.n <= 0x7fffffff && a.k >= 1 && a.k <= a.n);
  auto* w = static_cast<TopKWork*>(a.work);
  DF_CUDA_CHECK(cudaMemsetAsync(w, 0, sizeof(TopKWork), a.stream));  // zero counts, the empty prefix
  const uint32_t k = uint32_t(a.k);
  // A block per 8 x 256 logits, at most 128: Gemma 4's 262,144 take 128 blocks of 1,024 loads per thread round.
  const int64_t per_block = int64_t(kThreads) * kUnroll;
  const unsigned blocks = unsigned(std::min<int64_t>(128, (a.n + per_block - 1) / per_block));
  for (int pass = 0; pass < kPasses; ++pass) {
    top_k_count_kernel<<<blocks, kThreads, 0, a.stream>>>(a.x, a.n, w, pass);
    DF_CUDA_CHECK_LAUNCH();
    top_k_digit_kernel<<<1, 1, 0, a.stream>>>(w, pass, k);
    DF_CUDA_CHECK_LAUNCH();
  }
  top_k_gather_kernel<<<blocks, kThreads, 0, a.stream>>>(a.x, a.n, k, w, a.values, a.ids);
  DF_CUDA_CHECK_LAUNCH();
  top_k_tie_kernel<<<1, kTieThreads, 0, a.stream>>>(a.x, a.n, k, w, a.values, a.ids);
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
