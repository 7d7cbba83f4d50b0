// The tile machinery that both int8 tensor-core kernels share (mmq.cu: Q4_0 and Q8_0; mmq_piece.cu: the piece
// types): what a launch multiplies, an item's weight and activation rows, the biased MMA and its fragments, the
// stores into y, and the launch. mmq.cu's comment says the scheme.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/mmq.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/util/check.h"

namespace df::cuda::mmq {

constexpr int kMaxBN = 64;
constexpr uint32_t kBiasBits = 0x4B400000u;  // 1.5 * 2^23
constexpr float kBias = 12582912.0f;

template <int BM>
constexpr int threads_of() {
  return BM / 32 * 2 * 32;  // BM / 32 x 2 warps
}

// What a launch multiplies; tiles == nullptr: dense (block column t0 + i is token t0 + i), else moe_plan's tiles.
struct Params {
  const uint8_t* w = nullptr;
  uint64_t expert_stride = 0;
  int32_t n_expert = 0;
  int64_t rows = 0;
  int64_t nb = 0;  // quant blocks per row
  uint64_t row_bytes = 0;
  const uint8_t* act = nullptr;
  uint64_t act_stride = 0;
  int64_t n_tok = 0;
  const int32_t* order = nullptr;
  const int32_t* tiles = nullptr;
  int32_t group = 1;  // plan tiles merged into one item
  int32_t act_div = 1;
  float* y = nullptr;
  bool vec4 = false;   // the piece kernels: every row starts 4-byte aligned (whole words decoded)
  bool vec16 = false;  // every row's stages start 16-byte aligned (copied 16 bytes at a time)
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const int8_t* p) {
  const uint32_t addr = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// c = kBiasBits + A (16 x 32, row-major fragment a) * B (32 x 8, column-major fragment b0, b1), int32.
__device__ __forceinline__ void mma_s8_biased(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kBiasBits));
}

// The block's view of one item: its weight rows, activation rows and block count.
struct Item {
  const uint8_t* w = nullptr;  // row m0 of the (expert's) matrix
  int rows_left = 0;           // rows from m0 to the matrix end, at most BM
  int nb = 0;                  // quant blocks per row
  uint32_t row_bytes = 0;
};

// The warp's fragments of block kb of a shared weight tile w and activation tile a (rows RowB bytes apart, the
// warp's 32 rows from wm * 32, its BN / 2 tokens from wn * BN / 2): af[i] rows i * 16 .. + 15, bf[j] tokens j * 8 ..
// + 7 (multiply_stage says the layouts). Unless kFull, token tiles at or past n_valid stay zero.
template <int BN, int RowB, bool kFull>
__device__ __forceinline__ void load_fragments(const int8_t* w, const int8_t* a, int wm, int wn, int lane, int kb,
                                               int n_valid, uint32_t (&af)[2][4], uint32_t (&bf)[BN / 16][2]) {
  // A matrices: rows +0-7 / +8-15 / +0-7 / +8-15, k half 0 / 0 / 1 / 1.
  const int8_t* wbase = w + (wm * 32 + (lane & 7) + ((lane >> 3) & 1) * 8) * RowB + (lane >> 4) * 16 + kb * 32;
  // B matrices: tokens +0-7 / +0-7 / +8-15 / +8-15, k half 0 / 1 / 0 / 1 (two 8-token tiles per ldmatrix).
  const int8_t* abase = a + (wn * (BN / 2) + (lane & 7) + (lane >> 4) * 8) * RowB + ((lane >> 3) & 1) * 16 + kb * 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) ldmatrix_x4(af[i], wbase + i * 16 * RowB);
#pragma unroll
  for (int j2 = 0; j2 < BN / 32; ++j2) {
    uint32_t r[4] = {};
    if (kFull || j2 * 16 < n_valid) ldmatrix_x4(r, abase + j2 * 16 * RowB);
    bf[2 * j2][0] = r[0];
    bf[2 * j2][1] = r[1];
    bf[2 * j2 + 1][0] = r[2];
    bf[2 * j2 + 1][1] = r[3];
  }
}

// Grouped: the header of item ty into sm.hdr (warp 0). The item is absorbed (count 0) unless the plan tile ty is the
// first of a run of p.group tiles of its expert, counted from the expert's first tile; a leader takes the slots of
// the run's tiles, which are consecutive in the plan and in order.
__device__ __forceinline__ void item_header(const Params& p, int ty, int n_tiles, int lane, int32_t (&hdr)[4]) {
  const int32_t e = p.tiles[1 + 3 * ty];
  int before = 0;  // tiles of expert e before ty
  for (int base = ty - 1; base >= 0; base -= 32) {
    const int idx = base - lane;
    const unsigned same = __ballot_sync(0xffffffffu, idx >= 0 && p.tiles[1 + 3 * idx] == e);
    const int run = same == 0xffffffffu ? 32 : __ffs(int(~same)) - 1;
    before += run;
    if (run < 32) break;
  }
  int cnt = 0;
  if (before % p.group == 0) {
    const int idx = ty + lane;
    const int c = lane < p.group && idx < n_tiles && p.tiles[1 + 3 * idx] == e ? p.tiles[3 + 3 * idx] : 0;
    cnt = __reduce_add_sync(0xffffffffu, c);
  }
  if (lane == 0) {
    hdr[0] = e;
    hdr[1] = p.tiles[2 + 3 * ty];
    hdr[2] = cnt;
  }
}

// Item ty's weights, activation rows (sm.arow) and output rows (sm.dst); returns its slot or token count, 0 where
// the item was absorbed by an earlier one. Every thread calls it; it ends with a barrier.
template <int BM, int BN, class Sm>
__device__ __forceinline__ int begin_item(const Params& p, Sm& sm, int ty, int n_items, int64_t m0, Item& it) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  int cnt;
  if (p.tiles != nullptr) {
    if (warp == 0) item_header(p, ty, n_items, lane, sm.hdr);
    __syncthreads();
    const int32_t e = sm.hdr[0], first = sm.hdr[1];
    cnt = sm.hdr[2];
    if (cnt == 0) {
      __syncthreads();  // every thread has read the header before warp 0 writes the next one
      return 0;
    }
    if (e < 0 || e >= p.n_expert || cnt > BN) __trap();  // a corrupt plan: a bug
    it.w = p.w + uint64_t(e) * p.expert_stride;
    for (int n = tid; n < BN; n += blockDim.x) {
      const int32_t v = n < cnt ? p.order[first + n] : 0;
      sm.arow[n] = n < cnt ? p.act + uint64_t(v / p.act_div) * p.act_stride : nullptr;
      sm.dst[n] = v;
    }
  } else {
    const int64_t t0 = int64_t(ty) * BN;
    cnt = int(min(int64_t(BN), p.n_tok - t0));
    it.w = p.w;
    for (int n = tid; n < BN; n += blockDim.x) {
      sm.arow[n] = n < cnt ? p.act + uint64_t(t0 + n) * p.act_stride : nullptr;
      sm.dst[n] = int32_t(t0 + n);
    }
  }
  it.w += uint64_t(m0) * p.row_bytes;
  it.rows_left = int(min(int64_t(BM), p.rows - m0));
  it.nb = int(p.nb);
  it.row_bytes = uint32_t(p.row_bytes);
  __syncthreads();
  return cnt;
}

// The warp's accumulators into y; a barrier follows (sm.dst and the header are rewritten by the next item).
template <int BM, int BN, class Sm>
__device__ __forceinline__ void store_item(const Params& p, const Sm& sm, const Item& it, int64_t m0, int cnt,
                                           int n_valid, const float (&acc)[2][BN / 16][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp % (BM / 32), wn = warp / (BM / 32);
  if (n_valid > 0) {
    const int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < BN / 16; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int r = wm * 32 + i * 16 + (c / 2) * 8 + g;
          const int n = wn * (BN / 2) + j * 8 + 2 * q + (c % 2);
          if (r < it.rows_left && n < cnt) p.y[int64_t(sm.dst[n]) * p.rows + m0 + r] = acc[i][j][c];
        }
  }
  __syncthreads();
}

// A tile kernel of BM-row tiles on grid (gx, gy) with smem bytes of dynamic shared memory.
template <int BM>
void launch_tile_kernel(void (*kernel)(const Params), int smem, const Params& p, unsigned gx, unsigned gy,
                        cudaStream_t stream) {
  // Above the 48 KiB that a launch gets without asking (the attribute is per function and device: set every time).
  DF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  // The launch bounds' blocks per SM need most of the unified L1 as shared memory (the loads stream through L1).
  DF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));
  kernel<<<dim3{gx, gy}, threads_of<BM>(), smem, stream>>>(p);
  DF_CUDA_CHECK_LAUNCH();
}

// mmq_piece.cu: the piece type t's kernel for a bm x bn tile, false where it has none (64-row tiles only).
bool launch_pieces(gguf::GgmlType t, int bm, int bn, const Params& p, unsigned gx, unsigned gy, cudaStream_t stream);

// The piece kernels' alignment flags for w's rows (and its experts, expert_stride apart): base, rows and strides
// 4-byte aligned (vec4) and 16-byte aligned with stages of a multiple of 16 bytes (vec16).
void set_piece_alignment(Params& p, const model::Mat& w, uint64_t expert_stride);

}  // namespace df::cuda::mmq
