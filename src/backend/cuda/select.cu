// Repeat penalty and exact top-k selection for the sampler (select.h).
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

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// Unsigned keys in the order of the floats: a > b exactly when key(a) > key(b) for numbers, -0 == +0, NaN lowest.
__device__ __forceinline__ uint32_t order_key(float f) {
  if (f != f) return 0u;
  const uint32_t u = f == 0.0f ? 0u : __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kUnroll = 8;  // logits a thread loads before it counts any: a pass over 262,144 waits for L2 32 times

__global__ void __launch_bounds__(kThreads) top_k_kernel(const float* __restrict__ x, int64_t n, uint32_t k,
                                                         float* __restrict__ out_v, int32_t* __restrict__ out_i) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix, s_rem, s_n_eq, s_n_gt, s_eq_taken;
  __shared__ uint32_t s_warp[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  constexpr int64_t kStep = int64_t(kThreads) * kUnroll;

  // Radix select from the top byte: after the pass at `shift`, `prefix` holds the bits above and at shift of the
  // k-th largest key, and `rem` how many of the keys sharing those bits still belong to the k best.
  uint32_t prefix = 0, mask = 0, rem = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) hist[b] = 0;
    __syncthreads();
    for (int64_t base = 0; base < n; base += kStep) {  // uniform trip count: the warp votes below need it
      uint32_t bins[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + int64_t(u) * kThreads + threadIdx.x;
        bins[u] = 256;  // not counted
        if (i < n) {
          const uint32_t key = order_key(x[i]);
          if ((key & mask) == prefix) bins[u] = (key >> shift) & 255u;
        }
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
    if (threadIdx.x == 0) {
      // The digit d where the count of keys above reaches rem; sum(hist) >= rem, so d = 0 at the latest.
      uint32_t above = 0;
      int d = 255;
      for (; d > 0; --d) {
        if (above + hist[d] >= rem) break;
        above += hist[d];
      }
      s_prefix = prefix | (uint32_t(d) << shift);
      s_rem = rem - above;
      s_n_eq = hist[d];  // after the last pass: the keys equal to the k-th largest
      s_n_gt = 0;
      s_eq_taken = 0;
    }
    __syncthreads();
    prefix = s_prefix;
    rem = s_rem;
    mask |= 255u << shift;
  }
  // Now `prefix` is the k-th largest key T: the k - rem keys above T all win, and of the keys equal to T the rem
  // with the lowest indices (the host sort breaks ties by index, so partial_sort keeps those). Where every key equal
  // to T wins (no tie straddles the k-th place, the usual case), one pass takes all winners in any order.
  const uint32_t T = prefix, n_gt = k - rem;
  const bool all_eq = s_n_eq == rem;
  for (int64_t base = 0; base < n; base += kStep) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kThreads + threadIdx.x;
      v[u] = i < n ? x[i] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kThreads + threadIdx.x;
      if (i >= n) continue;
      const uint32_t key = order_key(v[u]);
      uint32_t slot = k;
      if (key > T) slot = atomicAdd(&s_n_gt, 1u);  // < n_gt: exactly n_gt keys are above T
      else if (key == T && all_eq) slot = n_gt + atomicAdd(&s_eq_taken, 1u);
      if (slot < k) {
        out_v[slot] = v[u];
        out_i[slot] = int32_t(i);
      }
    }
  }
  if (all_eq) return;
  // A tie across the k-th place: the keys equal to T in index order, chunk by chunk, until rem are taken.
  uint32_t eq_seen = 0;  // keys equal to T in earlier chunks, the same in every thread
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const float v = i < n ? x[i] : 0.0f;
    const bool eq = i < n && order_key(v) == T;
    const uint32_t ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) s_warp[warp] = uint32_t(__popc(ballot));
    __syncthreads();
    uint32_t before = eq_seen + uint32_t(__popc(ballot & ((1u << lane) - 1u))), chunk = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) before += s_warp[w];
      chunk += s_warp[w];
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

void top_k(const TopKArgs& a) {
  DF_CHECK(a.x != nullptr && a.values != nullptr && a.ids != nullptr);
  DF_CHECK(a.n > 0 && a.n <= 0x7fffffff && a.k >= 1 && a.k <= a.n);
  top_k_kernel<<<1, kThreads, 0, a.stream>>>(a.x, a.n, uint32_t(a.k), a.values, a.ids);
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
