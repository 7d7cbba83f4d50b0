// Groups the routed (token, slot) pairs of a batch by expert on the device, for moe_matmul_grouped: a counting
// sort in one block (n_expert <= 1024), then the tiles of at most tile_slots slots of one expert (8 for matmul.cu's
// warp-per-row kernel, 32 for the tensor-core kernels of mmq.cu).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kMaxExperts = 1024;
constexpr int kMaxTileSlots = 64;  // mmq.cu's widest token tile

__global__ void __launch_bounds__(kThreads)
    moe_plan_kernel(const int32_t* __restrict__ ids, int64_t n_slots, int n_expert, int32_t* __restrict__ order,
                    int32_t* __restrict__ tiles, int64_t max_tiles, int tile_slots,
                    const int32_t* __restrict__ slot_of) {
  __shared__ int count[kMaxExperts];
  __shared__ int offset[kMaxExperts];
  __shared__ int total;
  for (int e = threadIdx.x; e < n_expert; e += kThreads) count[e] = 0;
  __syncthreads();
  for (int64_t v = threadIdx.x; v < n_slots; v += kThreads) {
    const int32_t e = ids[v];
    if (e < 0 && slot_of) continue;        // a pair of another group
    if (e < 0 || e >= n_expert) __trap();  // the router (or the group's plan) wrote a bad id: a bug
    atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    int64_t nt = 0;
    for (int e = 0; e < n_expert; ++e) {
      offset[e] = run;
      for (int s = 0; s < count[e]; s += tile_slots) {
        if (nt >= max_tiles) __trap();  // cannot happen: max_tiles bounds the sum of ceil(count / tile_slots)
        tiles[1 + 3 * nt] = slot_of ? slot_of[e] : e;
        tiles[2 + 3 * nt] = run + s;
        tiles[3 + 3 * nt] = min(tile_slots, count[e] - s);
        ++nt;
      }
      run += count[e];
    }
    tiles[0] = int32_t(nt);
    total = run;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < n_expert; e += kThreads) count[e] = 0;  // now the per-expert cursors
  __syncthreads();
  for (int64_t v = threadIdx.x; v < n_slots; v += kThreads) {
    const int32_t e = ids[v];
    if (e < 0) continue;
    order[offset[e] + atomicAdd(&count[e], 1)] = int32_t(v);
  }
  for (int64_t v = total + threadIdx.x; v < n_slots; v += kThreads) order[v] = 0;
}

}  // namespace

void moe_plan(const MoePlanArgs& a) {
  DF_CHECK(a.ids != nullptr && a.order != nullptr && a.tiles != nullptr);
  DF_CHECK(a.n_slots > 0 && a.n_slots <= 0x7fffffff && a.n_expert > 0 && a.n_expert <= kMaxExperts);
  DF_CHECK(a.tile_slots >= 1 && a.tile_slots <= kMaxTileSlots);
  moe_plan_kernel<<<1, kThreads, 0, a.stream>>>(a.ids, a.n_slots, a.n_expert, a.order, a.tiles,
                                                moe_max_tiles(a.n_slots, a.n_expert, a.tile_slots), a.tile_slots,
                                                a.slot_of);
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
