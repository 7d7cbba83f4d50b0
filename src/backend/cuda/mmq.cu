// Prefill products on the int8 tensor cores (mma.sync m16n8k32, sm_80 and later): Q4_0 / Q8_0 weights (and the
// piece types, below) times Q8_0 activations. k = 32 is one quant block, so one MMA yields the exact integer block
// dots of a 16-row x 8-token tile. Each is scaled and accumulated as acc = fma(d_w * dot, d_a, acc), d_w * dot
// rounded once (where the dp4a kernel rounds nothing before its fma: the difference is one f32 rounding of each
// block's term), the blocks summed in index order.
//
// The scaling is the hot part of the loop (two fmas per MMA output and block): the MMA's int32 accumulator starts at
// the bits of 1.5 * 2^23, so that its result read as a float is 1.5 * 2^23 + dot exactly (|dot| < 2^22), and
// fma(d_w, that, -d_w * 1.5 * 2^23) removes the offset and scales in one instruction (-d_w * 1.5 * 2^23 is exact: d_w
// comes from an f16 and has 11 significant bits). The pairs {d_w, -d_w * 1.5 * 2^23} are computed once per stage.
//
// A block of BM / 32 x 2 warps computes BM weight rows (128, or 64 for grids too small to fill the GPU) x BN tokens
// (64, or 32 for small batches); warp (wm, wn) a 32-row x BN/2-token part as 2 x BN/16 MMA tiles. K runs in stages
// of 4 quant blocks: the next stage's raw blocks are loaded into registers while the current one multiplies from
// shared memory (two buffers, one barrier per stage). The loads are coalesced: consecutive lanes read consecutive
// 4-byte words of one row's stage (16 lanes a Q4_0 row, a warp a Q8_0 row or an activation row), as 16-bit halves
// because the 18- and 34-byte quant blocks are only 2-byte aligned; the scales come in a second, narrower pass.
// Shared layout per buffer:
//   w  [BM rows][4 blocks x 32 int8 + 16 pad]   Q4_0 unpacked to signed int8 (nibble - 8), Q8_0 copied
//   a  [BN tokens][4 blocks x 32 int8 + 16 pad]
//   dw [4][BM] {d_w, -d_w * 1.5 * 2^23}, da [4][BN] f32
// Rows of 144 bytes put the 8 rows that one ldmatrix phase reads into distinct banks. Rows past the matrix, tokens
// past the tile and blocks past the row are zeros with scale 0, and their results are never stored.
//
// Grouped experts: moe_plan cuts each expert's slots into tiles of tile_slots; the kernel merges runs of
// 64 / tile_slots consecutive tiles of one expert into one item of up to 64 slots, so an expert's weights are read
// once per 64 slots. Block column ty takes plan tile ty if it leads such a run and leaves otherwise, as it does past
// the plan's tile count read on the device (the grid is sized for the most tiles a plan can have).
#include <algorithm>
#include <type_traits>
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kquant.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mmq.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/util/check.h"

namespace df::cuda::mmq {

using gguf::GgmlType;

namespace {

constexpr int kKB = 4;                   // quant blocks per stage
constexpr int kRowBytes = kKB * 32 + 16;  // shared row: 4 blocks of int8 + pad
constexpr int kMaxBN = 64;
constexpr uint32_t kBiasBits = 0x4B400000u;  // 1.5 * 2^23
constexpr float kBias = 12582912.0f;

template <int BM>
constexpr int threads_of() {
  return BM / 32 * 2 * 32;  // BM / 32 x 2 warps
}
// Blocks per SM the launch bounds ask for: <= 128 registers a thread, except 64 x 64 (16 activation words a thread
// in flight), which would spill there.
template <int BM, int BN>
constexpr int min_blocks_of() {
  return BM == 128 ? 2 : BN == 64 ? 3 : 4;
}

template <int BM, int BN>
struct Smem {
  int8_t w[2][BM * kRowBytes];
  int8_t a[2][BN * kRowBytes];
  float2 dw[2][kKB][BM];
  float da[2][kKB][BN];
  const uint8_t* arow[BN];  // activation row of each block column, nullptr past the item
  int32_t dst[BN];          // output row of each block column
  int32_t hdr[4];           // grouped: the item's expert, first slot, slot count (0: absorbed by an earlier item)
};

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

// One thread's share of a stage's raw data. Weight word j = tid % kWInts of rows tid / kWInts + kWRowsPerPass * i;
// activation word lane of tokens warp + kWarps * i; scales of (row or token, block) t / 4, t % 4 for
// t = tid + kThreads * i.
template <GgmlType T, int BM, int BN>
struct Stage {
  static constexpr int kThreads = threads_of<BM>();
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kBlockBytes = T == GgmlType::Q4_0 ? dev::kQ4Bytes : dev::kQ8Bytes;
  static constexpr int kWordsPerBlock = T == GgmlType::Q4_0 ? 4 : 8;
  static constexpr int kWInts = kKB * kWordsPerBlock;  // quant words of one row's stage
  static constexpr int kWRowsPerPass = kThreads / kWInts;
  static constexpr int kWPer = BM / kWRowsPerPass;
  static constexpr int kAPer = BN / kWarps;
  static constexpr int kWScales = BM * kKB / kThreads;
  static constexpr int kAScales = (BN * kKB + kThreads - 1) / kThreads;
  static_assert(kThreads % kWInts == 0 && BM % kWRowsPerPass == 0 && BN % kWarps == 0);
  static_assert(BM * kKB % kThreads == 0);
  uint32_t wq[kWPer];
  uint16_t wd[kWScales];
  uint32_t aq[kAPer];
  uint16_t ad[kAScales];
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

// Bytes of 4 nibbles (0..15) minus 8 as int8, without borrows between bytes: n + 0x78 <= 0x87, then flipping bit 7
// subtracts 128.
__device__ __forceinline__ uint32_t nibbles_minus_8(uint32_t n) { return (n + 0x78787878u) ^ 0x80808080u; }

// The block's view of one item: its weight rows, activation rows and block count.
struct Item {
  const uint8_t* w = nullptr;  // row m0 of the (expert's) matrix
  int rows_left = 0;           // rows from m0 to the matrix end, at most BM
  int nb = 0;                  // quant blocks per row
  uint32_t row_bytes = 0;
};

// Stage s's raw blocks into registers; rows past the matrix or tokens past the item (arow nullptr) and blocks past
// the row end read as zeros.
template <GgmlType T, int BM, int BN>
__device__ __forceinline__ void load_stage(Stage<T, BM, BN>& st, const Smem<BM, BN>& sm, const Params& p,
                                           const Item& it, int s, int tid) {
  using S = Stage<T, BM, BN>;
  const int b0 = s * kKB;
  // The row addresses are recomputed each stage (one multiply-add each) rather than held in registers.
  const uint8_t* w = it.w;
  asm volatile("" : "+l"(w));
  {
    const int j = tid % S::kWInts, kb = j / S::kWordsPerBlock, wi = j % S::kWordsPerBlock;
    const bool in_k = b0 + kb < it.nb;
    const int r0 = tid / S::kWInts;
    const uint8_t* base = w + (b0 + kb) * S::kBlockBytes + 2 + 4 * wi;
#pragma unroll
    for (int i = 0; i < S::kWPer; ++i) {
      const int r = r0 + S::kWRowsPerPass * i;
      if (in_k && r < it.rows_left) {
        st.wq[i] = uint32_t(dev::load_i32_a2(base + uint32_t(r) * it.row_bytes));
      } else {
        st.wq[i] = T == GgmlType::Q4_0 ? 0x88888888u : 0u;  // zeros after - 8
      }
    }
  }
#pragma unroll
  for (int i = 0; i < S::kWScales; ++i) {
    const int t = tid + S::kThreads * i, r = t / kKB, kb = t % kKB;
    st.wd[i] = b0 + kb < it.nb && r < it.rows_left
                   ? *reinterpret_cast<const uint16_t*>(w + uint32_t(r) * it.row_bytes + (b0 + kb) * S::kBlockBytes)
                   : uint16_t(0);
  }
  {
    const int lane = tid % 32, warp = tid / 32, kb = lane / 8, wi = lane % 8;
    const bool in_k = b0 + kb < it.nb;
    const int off = (b0 + kb) * dev::kQ8Bytes + 2 + 4 * wi;
#pragma unroll
    for (int i = 0; i < S::kAPer; ++i) {
      const uint8_t* ar = sm.arow[warp + S::kWarps * i];
      st.aq[i] = ar != nullptr && in_k ? uint32_t(dev::load_i32_a2(ar + off)) : 0u;
    }
  }
#pragma unroll
  for (int i = 0; i < S::kAScales; ++i) {
    const int t = tid + S::kThreads * i, n = t / kKB, kb = t % kKB;
    const uint8_t* ar = t < BN * kKB ? sm.arow[n] : nullptr;
    st.ad[i] = ar != nullptr && b0 + kb < it.nb
                   ? *reinterpret_cast<const uint16_t*>(ar + (b0 + kb) * dev::kQ8Bytes)
                   : uint16_t(0);
  }
}

template <GgmlType T, int BM, int BN>
__device__ __forceinline__ void store_stage(const Stage<T, BM, BN>& st, Smem<BM, BN>& sm, int buf, int tid) {
  using S = Stage<T, BM, BN>;
  {
    const int j = tid % S::kWInts, kb = j / S::kWordsPerBlock, wi = j % S::kWordsPerBlock;
    const int r0 = tid / S::kWInts;
#pragma unroll
    for (int i = 0; i < S::kWPer; ++i) {
      int8_t* d = sm.w[buf] + (r0 + S::kWRowsPerPass * i) * kRowBytes + kb * 32 + 4 * wi;
      if constexpr (T == GgmlType::Q4_0) {
        // Byte b of the block's 16 holds element b (low nibble) and b + 16 (high nibble).
        *reinterpret_cast<uint32_t*>(d) = nibbles_minus_8(st.wq[i] & 0x0f0f0f0fu);
        *reinterpret_cast<uint32_t*>(d + 16) = nibbles_minus_8((st.wq[i] >> 4) & 0x0f0f0f0fu);
      } else {
        *reinterpret_cast<uint32_t*>(d) = st.wq[i];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < S::kWScales; ++i) {
    const int t = tid + S::kThreads * i;
    const float d = dev::f16_to_f32(st.wd[i]);
    sm.dw[buf][t % kKB][t / kKB] = make_float2(d, -d * kBias);
  }
  {
    const int lane = tid % 32, warp = tid / 32, kb = lane / 8, wi = lane % 8;
#pragma unroll
    for (int i = 0; i < S::kAPer; ++i) {
      const int n = warp + S::kWarps * i;
      *reinterpret_cast<uint32_t*>(sm.a[buf] + n * kRowBytes + kb * 32 + 4 * wi) = st.aq[i];
    }
  }
#pragma unroll
  for (int i = 0; i < S::kAScales; ++i) {
    const int t = tid + S::kThreads * i;
    if (t < BN * kKB) sm.da[buf][t % kKB][t / kKB] = dev::f16_to_f32(st.ad[i]);
  }
}

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

// The warp's 32 x BN/2 part over the first kbn blocks of shared buffer buf. Fragment layouts (PTX ISA, mma
// m16n8k32 .s8): with g = lane / 4 and q = lane % 4, A register 0..3 holds row g / g+8 / g / g+8 at bytes 4q.. of k
// half 0 / 0 / 1 / 1; B register 0 / 1 token g at bytes 4q.. of k half 0 / 1; C 0..3 row g / g / g+8 / g+8, token
// 2q / 2q+1 / 2q / 2q+1. ldmatrix.x4 hands lane l word l % 4 of row l / 4 of matrix 0..3, the matrices' row
// addresses coming from lanes 0-7, 8-15, 16-23, 24-31.
// Unless kFull, token tiles at or past n_valid (the item's tokens from the warp's first) are skipped: their results
// are never stored. kFull (every token valid) keeps the full tile's loop free of branches.
template <int BM, int BN, bool kFull>
__device__ __forceinline__ void multiply_stage(const Smem<BM, BN>& sm, int buf, int kbn, int wm, int wn, int lane,
                                               int n_valid, float (&acc)[2][BN / 16][4]) {
  constexpr int kNT = BN / 16;  // 8-token MMA tiles per warp
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int kb = 0; kb < kKB; ++kb) {
    if (kb < kbn) {
      uint32_t af[2][4], bf[kNT][2];
      load_fragments<BN, kRowBytes, kFull>(sm.w[buf], sm.a[buf], wm, wn, lane, kb, n_valid, af, bf);
      float2 dw[2][2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) dw[i][h] = sm.dw[buf][kb][wm * 32 + i * 16 + h * 8 + g];
      float2 da[kNT];
#pragma unroll
      for (int j = 0; j < kNT; ++j)
        da[j] = *reinterpret_cast<const float2*>(&sm.da[buf][kb][wn * (BN / 2) + j * 8 + 2 * q]);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
          if (!kFull && j * 8 >= n_valid) continue;
          int c[4];
          mma_s8_biased(c, af[i], bf[j][0], bf[j][1]);
          acc[i][j][0] = fmaf(fmaf(dw[i][0].x, __int_as_float(c[0]), dw[i][0].y), da[j].x, acc[i][j][0]);
          acc[i][j][1] = fmaf(fmaf(dw[i][0].x, __int_as_float(c[1]), dw[i][0].y), da[j].y, acc[i][j][1]);
          acc[i][j][2] = fmaf(fmaf(dw[i][1].x, __int_as_float(c[2]), dw[i][1].y), da[j].x, acc[i][j][2]);
          acc[i][j][3] = fmaf(fmaf(dw[i][1].x, __int_as_float(c[3]), dw[i][1].y), da[j].y, acc[i][j][3]);
        }
    }
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

// grid: (ceil(rows / BM), dense ? ceil(n_tok / BN) : up to the plan's tile records); each block loops over items
// blockIdx.y, blockIdx.y + gridDim.y, ... below the item count.
template <GgmlType T, int BM, int BN>
__global__ void __launch_bounds__(threads_of<BM>(), min_blocks_of<BM, BN>()) mmq_kernel(const Params p) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  Smem<BM, BN>& sm = *reinterpret_cast<Smem<BM, BN>*>(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp % (BM / 32), wn = warp / (BM / 32);
  const int n_items = p.tiles != nullptr ? p.tiles[0] : int((p.n_tok + BN - 1) / BN);
  const int64_t m0 = int64_t(blockIdx.x) * BM;
  const int nb = int(p.nb), n_stages = (nb + kKB - 1) / kKB;

  for (int ty = blockIdx.y; ty < n_items; ty += gridDim.y) {
    Item it;
    const int cnt = begin_item<BM, BN>(p, sm, ty, n_items, m0, it);
    if (cnt == 0) continue;
    // Warps whose tokens all lie past the item skip the products, the others the 8-token tiles past it.
    const int n_valid = cnt - wn * (BN / 2);
    float acc[2][BN / 16][4] = {};
    Stage<T, BM, BN> st;
    load_stage<T, BM, BN>(st, sm, p, it, 0, tid);
    store_stage<T, BM, BN>(st, sm, 0, tid);
    __syncthreads();
    for (int s = 0; s < n_stages; ++s) {
      const bool more = s + 1 < n_stages;
      if (more) load_stage<T, BM, BN>(st, sm, p, it, s + 1, tid);
      const int kbn = min(kKB, nb - s * kKB);
      if (n_valid >= BN / 2) {
        multiply_stage<BM, BN, true>(sm, s & 1, kbn, wm, wn, lane, n_valid, acc);
      } else if (n_valid > 0) {
        multiply_stage<BM, BN, false>(sm, s & 1, kbn, wm, wn, lane, n_valid, acc);
      }
      // The other buffer was last read by the previous stage's multiply, which every thread finished before the
      // barrier that ended it.
      if (more) store_stage<T, BM, BN>(st, sm, (s + 1) & 1, tid);
      __syncthreads();
    }
    store_item<BM, BN>(p, sm, it, m0, cnt, n_valid, acc);
  }
}

// ---- The piece types (kquant.cuh): K-quants, IQ4 and the 32-element offset types.
//
// A stage is 8 pieces of 32 (one super-block, or 8 blocks of the 32-element types), and the weights are not unpacked
// on their way through registers: their rows' raw bytes of the next stage are copied into shared memory
// asynchronously (cp.async: 4-byte words of the aligned window over each row's stage, the blocks being only 2-byte
// aligned, or 16-byte chunks where every stage starts 16-byte aligned, as Q4_K's 144-byte ones do in rows of a
// multiple of 16 bytes), and after the barrier each thread decodes pieces from there with kquant.cuh's decoder (whole
// words where the rows are 4-byte aligned) into the int8 tile the MMAs read, with each piece's scales and offsets
// beside it. One tile buffer and two raw buffers: a stage's copies overlap the decoding and the products of the one
// before. The activations come through registers as above, and their codes' sums per half (the offsets' terms) are
// formed as they are stored.
//
// Each 32-element block's term is then, with dot_h the integer dot of half h and s_h the activations' code sum:
//   types with one scale per piece:  da * (d * dot + m * (s_0 + s_1))           (one k32 MMA)
//   Q2_K, Q3_K, Q6_K (per-16 scales): da * (d_0 * dot_0 + d_1 * dot_1 + m_0 * s_0 + m_1 * s_1)  (two k16 MMAs)
// d * dot comes out of the biased accumulator exactly rounded, as for Q4_0 (d - a scale times an f16 - has at most 19
// significant bits, so -d * 1.5 * 2^23 is exact); the single-scale types' block terms equal the dp4a kernels'
// (kq::piece_dot) bit for bit, and only the order of the sum over blocks differs. The scales are packed so that a
// piece's weight side is one 16- or 8-byte read and a token's one 4-, 8- or 16-byte read: the products are bound by
// the shared memory's pipe, and that also keeps Q4_K's 64 x 32 tile within four blocks per SM.
constexpr int kPKB = 8;                     // pieces per stage
constexpr int kPRowBytes = kPKB * 32 + 16;  // shared row: 8 pieces of int8 + pad (68 words: 4 mod 32, as kRowBytes)

template <GgmlType T>
constexpr int stage_bytes() {
  return kq::super_block(T) ? kq::block_bytes(T) : kPKB * kq::block_bytes(T);
}
// Words of the aligned window over a stage that starts 2-byte aligned.
template <GgmlType T>
constexpr int raw_words() {
  return (stage_bytes<T>() + 2 + 3) / 4;
}

// The per-piece scales in shared memory.
//   weights: per-16 types {d_0, -d_0 * kBias, d_1, -d_1 * kBias}; with offsets {d, -d * kBias, m, 0}; else
//            {d, -d * kBias}. Q2_K's offsets {m_0, m_1} apart.
//   tokens:  offsets per-16 {d_a, s_0, s_1, 0}; offsets {d_a, s_0 + s_1}; else d_a.
template <GgmlType T>
struct PieceScales {
  static constexpr bool kHalves = kq::half_scales(T), kOffset = kq::has_offset(T);
  using W = std::conditional_t<kHalves || kOffset, float4, float2>;
  using A = std::conditional_t<kOffset, std::conditional_t<kHalves, float4, float2>, float>;
};

template <GgmlType T, int BM, int BN>
struct PieceSmem {
  using Sc = PieceScales<T>;
  int8_t w[BM * kPRowBytes];
  int8_t a[BN * kPRowBytes];
  typename Sc::W ws[kPKB][BM];
  float2 wm[Sc::kHalves && Sc::kOffset ? kPKB : 1][BM];
  typename Sc::A as[kPKB][BN];
  uint32_t raw[2][BM * raw_words<T>()];
  const uint8_t* arow[BN];
  int32_t dst[BN];
  int32_t hdr[4];
};

// One thread's activation words of a stage: words lane and lane + 32 of the 64 of tokens warp + kWarps * i, and the
// scales of (token, block) t / kPKB, t % kPKB for t = tid + kThreads * i.
template <int BM, int BN>
struct PieceAct {
  static constexpr int kThreads = threads_of<BM>();
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kPer = BN / kWarps;
  static constexpr int kScales = (BN * kPKB + kThreads - 1) / kThreads;
  static_assert(BN % kWarps == 0);
  uint32_t q[kPer][2];
  uint16_t d[kScales];
};

__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(uint32_t(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(uint32_t(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Words between rows of a raw buffer: 16-byte chunks in rows of the stage's length, else the aligned windows.
template <GgmlType T>
__device__ __forceinline__ int raw_stride(bool vec16) {
  if constexpr (stage_bytes<T>() % 16 == 0) return vec16 ? stage_bytes<T>() / 4 : raw_words<T>();
  return raw_words<T>();
}

// The raw bytes of stage s of the item's rows into raw buffer buf: per row the aligned words over the stage's
// blocks (the last word may reach 2 bytes past them, never past the aligned word that holds the row's last byte).
template <GgmlType T, int BM, int BN>
__device__ __forceinline__ void issue_raw(PieceSmem<T, BM, BN>& sm, const Item& it, int s, int buf, int tid,
                                          bool vec16) {
  constexpr int W = raw_words<T>();
  const uint32_t first = uint32_t(s) * stage_bytes<T>();
  const int nbytes = kq::super_block(T) ? stage_bytes<T>() : min(kPKB, it.nb - s * kPKB) * kq::block_bytes(T);
  if constexpr (stage_bytes<T>() % 16 == 0) {
    if (vec16) {
      // A partial last stage's chunks end inside the row, whose length is a multiple of 16 too.
      constexpr int C = stage_bytes<T>() / 16;
      const int nc = (nbytes + 15) / 16;
      for (int idx = tid; idx < BM * C; idx += threads_of<BM>()) {
        const int r = idx / C, k = idx % C;
        if (r >= it.rows_left) break;
        if (k < nc)
          cp_async16(&sm.raw[buf][r * (C * 4) + 4 * k], it.w + uint32_t(r) * it.row_bytes + first + 16u * k);
      }
      cp_async_commit();
      return;
    }
  }
  for (int idx = tid; idx < BM * W; idx += threads_of<BM>()) {
    const int r = idx / W, k = idx % W;
    if (r >= it.rows_left) break;  // idx only grows: every later word is of a row past the matrix too
    const uintptr_t a = reinterpret_cast<uintptr_t>(it.w + uint32_t(r) * it.row_bytes + first);
    if (k < int(((a & 3u) + nbytes + 3) >> 2))
      cp_async4(&sm.raw[buf][r * W + k], reinterpret_cast<const void*>((a & ~uintptr_t(3)) + 4u * k));
  }
  cp_async_commit();
}

// Raw buffer buf (stage s) decoded into the weight tile: thread tid takes piece tid % kPKB of rows tid / kPKB +
// BM / 4 * i. Rows past the matrix and pieces past the row end are zeros with scale 0. vec4: every row starts 4-byte
// aligned (the windows start at the stages, and the types with word_aligned_blocks read whole words).
template <GgmlType T, int BM, int BN>
__device__ __forceinline__ void decode_pieces(PieceSmem<T, BM, BN>& sm, const Item& it, int s, int buf, int tid,
                                              bool vec4, bool vec16) {
  using Sc = PieceScales<T>;
  const int W = raw_stride<T>(vec16);
  const int kb = tid % kPKB;
  const bool in_k = s * kPKB + kb < it.nb;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = tid / kPKB + BM / 4 * i;
    kq::Piece pc = {};
    if (in_k && r < it.rows_left) {
      const uint8_t* raw = reinterpret_cast<const uint8_t*>(&sm.raw[buf][r * W]);
      bool whole = false;
      if constexpr (kq::word_aligned_blocks(T)) {
        if (vec4) {
          pc = kq::piece<T, true>(raw, kb);
          whole = true;
        }
      }
      if (!whole) {
        const uintptr_t a = reinterpret_cast<uintptr_t>(it.w + uint32_t(r) * it.row_bytes + uint32_t(s) * stage_bytes<T>());
        pc = kq::piece<T>(raw + (a & 3u), kb);
      }
    }
    int4* dst = reinterpret_cast<int4*>(sm.w + r * kPRowBytes + kb * 32);
    dst[0] = {pc.q[0], pc.q[1], pc.q[2], pc.q[3]};
    dst[1] = {pc.q[4], pc.q[5], pc.q[6], pc.q[7]};
    if constexpr (Sc::kHalves) {
      sm.ws[kb][r] = {pc.d[0], -pc.d[0] * kBias, pc.d[1], -pc.d[1] * kBias};
      if constexpr (Sc::kOffset) sm.wm[kb][r] = {pc.m[0], pc.m[1]};
    } else if constexpr (Sc::kOffset) {
      sm.ws[kb][r] = {pc.d[0], -pc.d[0] * kBias, pc.m[0], 0.0f};
    } else {
      sm.ws[kb][r] = {pc.d[0], -pc.d[0] * kBias};
    }
  }
}

template <int BM, int BN, class Sm>
__device__ __forceinline__ void load_act(PieceAct<BM, BN>& st, const Sm& sm, const Item& it, int s, int tid) {
  using A = PieceAct<BM, BN>;
  const int b0 = s * kPKB, lane = tid % 32, warp = tid / 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int kb = lane / 8 + 4 * h, wi = lane % 8;
    const bool in_k = b0 + kb < it.nb;
    const int off = (b0 + kb) * dev::kQ8Bytes + 2 + 4 * wi;
#pragma unroll
    for (int i = 0; i < A::kPer; ++i) {
      const uint8_t* ar = sm.arow[warp + A::kWarps * i];
      st.q[i][h] = ar != nullptr && in_k ? uint32_t(dev::load_i32_a2(ar + off)) : 0u;
    }
  }
#pragma unroll
  for (int i = 0; i < A::kScales; ++i) {
    const int t = tid + A::kThreads * i, n = t / kPKB, kb = t % kPKB;
    const uint8_t* ar = t < BN * kPKB ? sm.arow[n] : nullptr;
    st.d[i] = ar != nullptr && b0 + kb < it.nb ? *reinterpret_cast<const uint16_t*>(ar + (b0 + kb) * dev::kQ8Bytes)
                                               : uint16_t(0);
  }
}

// The activation words into the tile and, for the types with offsets, each block half's code sum beside its scale
// (different words of one record, from different threads).
template <GgmlType T, int BM, int BN>
__device__ __forceinline__ void store_act(const PieceAct<BM, BN>& st, PieceSmem<T, BM, BN>& sm, int tid) {
  using A = PieceAct<BM, BN>;
  using Sc = PieceScales<T>;
  const int lane = tid % 32, warp = tid / 32;
  int sums[A::kPer][2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int kb = lane / 8 + 4 * h, wi = lane % 8;
#pragma unroll
    for (int i = 0; i < A::kPer; ++i) {
      const int n = warp + A::kWarps * i;
      *reinterpret_cast<uint32_t*>(sm.a + n * kPRowBytes + kb * 32 + 4 * wi) = st.q[i][h];
      if constexpr (Sc::kOffset) {
        // The half's 16 codes are the words of lanes 4k .. 4k + 3 (wi / 4 the half).
        int sum = __dp4a(int(st.q[i][h]), 0x01010101, 0);
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        sums[i][h] = sum;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < A::kScales; ++i) {
    const int t = tid + A::kThreads * i;
    if (t < BN * kPKB) {
      const float d = dev::f16_to_f32(st.d[i]);
      if constexpr (Sc::kOffset) {
        reinterpret_cast<float*>(&sm.as[t % kPKB][t / kPKB])[0] = d;
      } else {
        sm.as[t % kPKB][t / kPKB] = d;
      }
    }
  }
  if constexpr (Sc::kOffset) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int kb = lane / 8 + 4 * h, wi = lane % 8;
#pragma unroll
      for (int i = 0; i < A::kPer; ++i) {
        const int n = warp + A::kWarps * i;
        float* rec = reinterpret_cast<float*>(&sm.as[kb][n]);
        if constexpr (Sc::kHalves) {
          if (wi % 4 == 0) rec[1 + wi / 4] = float(sums[i][h]);
        } else {
          // The two halves' sums added by the lanes of the first half (lanes 4k + 4 hold the second).
          const int other = __shfl_down_sync(0xffffffffu, sums[i][h], 4);
          if (wi == 0) rec[1] = float(sums[i][h] + other);
        }
      }
    }
  }
}
// c = kBiasBits + A (16 x 16) * B (16 x 8), int32: one half of a piece (fragments as m16n8k32's k half).
__device__ __forceinline__ void mma_s8_k16_biased(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(b), "r"(kBiasBits));
}

// Tokens 2q and 2q + 1's scale records (n even).
template <class A>
struct TokenPair {
  A v[2];
};
template <class A>
__device__ __forceinline__ TokenPair<A> token_pair(const A* rec) {
  TokenPair<A> t;
  if constexpr (sizeof(A) <= 8) {
    // Two records of 4 or 8 bytes are one aligned 8- or 16-byte read.
    using Pair = std::conditional_t<sizeof(A) == 4, float2, float4>;
    const Pair p = *reinterpret_cast<const Pair*>(rec);
    t = *reinterpret_cast<const TokenPair<A>*>(&p);
  } else {
    t.v[0] = rec[0];
    t.v[1] = rec[1];
  }
  return t;
}

// multiply_stage for the piece types: the same fragments over a stage of kbn (<= kPKB) pieces, each block's term as
// the comment above says.
template <GgmlType T, int BM, int BN, bool kFull>
__device__ __forceinline__ void multiply_pieces(const PieceSmem<T, BM, BN>& sm, int kbn, int wm, int wn, int lane,
                                                int n_valid, float (&acc)[2][BN / 16][4]) {
  using Sc = PieceScales<T>;
  constexpr int kNT = BN / 16;
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int kb = 0; kb < kPKB; ++kb) {
    if (kb >= kbn) break;
    uint32_t af[2][4], bf[kNT][2];
    load_fragments<BN, kPRowBytes, kFull>(sm.w, sm.a, wm, wn, lane, kb, n_valid, af, bf);
    typename Sc::W ws[2][2];
    float2 wm2[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = wm * 32 + i * 16 + h * 8 + g;
        ws[i][h] = sm.ws[kb][row];
        if constexpr (Sc::kHalves && Sc::kOffset) wm2[i][h] = sm.wm[kb][row];
      }
    TokenPair<typename Sc::A> ts[kNT];
#pragma unroll
    for (int j = 0; j < kNT; ++j) ts[j] = token_pair(&sm.as[kb][wn * (BN / 2) + j * 8 + 2 * q]);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        if (!kFull && j * 8 >= n_valid) continue;
        int c0[4], c1[4];
        if constexpr (Sc::kHalves) {
          mma_s8_k16_biased(c0, af[i][0], af[i][1], bf[j][0]);
          mma_s8_k16_biased(c1, af[i][2], af[i][3], bf[j][1]);
        } else {
          mma_s8_biased(c0, af[i], bf[j][0], bf[j][1]);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const auto w = ws[i][c / 2];
          const auto a = ts[j].v[c % 2];
          float t = fmaf(w.x, __int_as_float(c0[c]), w.y);
          float da;
          if constexpr (Sc::kHalves) {
            t = __fadd_rn(t, fmaf(w.z, __int_as_float(c1[c]), w.w));
            if constexpr (Sc::kOffset) {
              t = fmaf(wm2[i][c / 2].x, a.y, t);
              t = fmaf(wm2[i][c / 2].y, a.z, t);
              da = a.x;
            } else {
              da = a;
            }
          } else if constexpr (Sc::kOffset) {
            t = fmaf(w.z, a.y, t);  // m * (s_0 + s_1)
            da = a.x;
          } else {
            da = a;
          }
          acc[i][j][c] = fmaf(t, da, acc[i][j][c]);
        }
      }
  }
}

template <GgmlType T, int BM, int BN>
__global__ void __launch_bounds__(threads_of<BM>(), BN == 64 ? 2 : 4) mmq_piece_kernel(const Params p) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  PieceSmem<T, BM, BN>& sm = *reinterpret_cast<PieceSmem<T, BM, BN>*>(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp % (BM / 32), wn = warp / (BM / 32);
  const int n_items = p.tiles != nullptr ? p.tiles[0] : int((p.n_tok + BN - 1) / BN);
  const int64_t m0 = int64_t(blockIdx.x) * BM;
  const int nb = int(p.nb), n_stages = (nb + kPKB - 1) / kPKB;

  for (int ty = blockIdx.y; ty < n_items; ty += gridDim.y) {
    Item it;
    const int cnt = begin_item<BM, BN>(p, sm, ty, n_items, m0, it);
    if (cnt == 0) continue;
    const int n_valid = cnt - wn * (BN / 2);
    float acc[2][BN / 16][4] = {};
    PieceAct<BM, BN> st;
    issue_raw<T, BM, BN>(sm, it, 0, 0, tid, p.vec16);
    load_act<BM, BN>(st, sm, it, 0, tid);
    for (int s = 0; s < n_stages; ++s) {
      const bool more = s + 1 < n_stages;
      // Stage s's raw bytes have landed, and every thread has finished the products of stage s - 1 (the tile is
      // free) and the decoding of stage s - 1 (its raw buffer is free for stage s + 1).
      cp_async_wait_all();
      __syncthreads();
      if (more) issue_raw<T, BM, BN>(sm, it, s + 1, (s + 1) & 1, tid, p.vec16);
      decode_pieces<T, BM, BN>(sm, it, s, s & 1, tid, p.vec4, p.vec16);
      store_act<T, BM, BN>(st, sm, tid);
      if (more) load_act<BM, BN>(st, sm, it, s + 1, tid);
      __syncthreads();
      const int kbn = min(kPKB, nb - s * kPKB);
      if (n_valid >= BN / 2) {
        multiply_pieces<T, BM, BN, true>(sm, kbn, wm, wn, lane, n_valid, acc);
      } else if (n_valid > 0) {
        multiply_pieces<T, BM, BN, false>(sm, kbn, wm, wn, lane, n_valid, acc);
      }
    }
    store_item<BM, BN>(p, sm, it, m0, cnt, n_valid, acc);
  }
}

bool mma_type(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q8_0 || kq::piece_type(t); }

template <GgmlType T, int BM, int BN>
void launch_t(const Params& p, unsigned gx, unsigned gy, cudaStream_t stream) {
  constexpr bool kPieces = kq::piece_type(T);
  void (*kernel)(const Params);
  int kSmem;
  if constexpr (kPieces) {
    kernel = mmq_piece_kernel<T, BM, BN>;
    kSmem = int(sizeof(PieceSmem<T, BM, BN>));
  } else {
    kernel = mmq_kernel<T, BM, BN>;
    kSmem = int(sizeof(Smem<BM, BN>));
  }
  // Above the 48 KiB that a launch gets without asking (the attribute is per function and device: set every time).
  DF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  // The launch bounds' blocks per SM need most of the unified L1 as shared memory (the loads stream through L1).
  DF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));
  kernel<<<dim3{gx, gy}, threads_of<BM>(), kSmem, stream>>>(p);
  DF_CUDA_CHECK_LAUNCH();
}

// The piece types take 64-row tiles only (their shared memory holds the raw stages too).
template <int BM, int BN>
void launch(GgmlType t, const Params& p, unsigned gx, unsigned gy, cudaStream_t stream) {
  switch (t) {
    case GgmlType::Q4_0: launch_t<GgmlType::Q4_0, BM, BN>(p, gx, gy, stream); return;
    case GgmlType::Q8_0: launch_t<GgmlType::Q8_0, BM, BN>(p, gx, gy, stream); return;
    default: break;
  }
  if constexpr (BM == 64) {
    switch (t) {
#define DF_MMQ_PIECE(T) \
  case T: launch_t<T, BM, BN>(p, gx, gy, stream); return;
      DF_MMQ_PIECE(GgmlType::Q4_1)
      DF_MMQ_PIECE(GgmlType::Q5_0)
      DF_MMQ_PIECE(GgmlType::Q5_1)
      DF_MMQ_PIECE(GgmlType::IQ4_NL)
      DF_MMQ_PIECE(GgmlType::Q2_K)
      DF_MMQ_PIECE(GgmlType::Q3_K)
      DF_MMQ_PIECE(GgmlType::Q4_K)
      DF_MMQ_PIECE(GgmlType::Q5_K)
      DF_MMQ_PIECE(GgmlType::Q6_K)
      DF_MMQ_PIECE(GgmlType::IQ4_XS)
#undef DF_MMQ_PIECE
      default: break;
    }
  }
  DF_CHECK_MSG(false, "mmq: no kernel for this weight type and tile");
}

void launch_shape(int bm, int bn, GgmlType t, const Params& p, unsigned gx, unsigned gy, cudaStream_t stream) {
  if (bm == 128 && bn == 64) {
    launch<128, 64>(t, p, gx, gy, stream);
  } else if (bm == 128) {
    launch<128, 32>(t, p, gx, gy, stream);
  } else if (bn == 64) {
    launch<64, 64>(t, p, gx, gy, stream);
  } else {
    launch<64, 32>(t, p, gx, gy, stream);
  }
}

void check_common(const model::Mat& w, const uint8_t* act, uint64_t act_stride, const float* y) {
  DF_CHECK(mma_type(w.type) && w.data != nullptr && w.rows > 0 && w.cols > 0 && w.cols % dev::kQK == 0);
  if (kq::piece_type(w.type))
    DF_CHECK(w.cols % kq::block_elems(w.type) == 0 &&
             w.row_bytes >= uint64_t(w.cols / kq::block_elems(w.type)) * kq::block_bytes(w.type));
  DF_CHECK(act != nullptr && y != nullptr);
  // 16-bit reads of weights and activations.
  DF_CHECK(reinterpret_cast<uintptr_t>(w.data) % 2 == 0 && w.row_bytes % 2 == 0);
  DF_CHECK(reinterpret_cast<uintptr_t>(act) % 2 == 0 && act_stride % 2 == 0);
  DF_CHECK(act_stride >= uint64_t(w.cols / dev::kQK) * dev::kQ8Bytes);
  // 32-bit offsets inside a block's rows and blocks.
  DF_CHECK(w.rows <= 0x7fffffff && w.row_bytes <= (uint64_t(1) << 24) && w.cols / dev::kQK <= 0x7fffffff / 64);
}

// The piece kernels' alignment flags for w's rows (and its experts, expert_stride apart): base, rows and strides
// 4-byte aligned (vec4) and 16-byte aligned with stages of a multiple of 16 bytes (vec16).
void set_alignment(Params& p, const model::Mat& w, uint64_t expert_stride) {
  auto aligned = [&](uint64_t n) {
    return reinterpret_cast<uintptr_t>(w.data) % n == 0 && w.row_bytes % n == 0 && expert_stride % n == 0;
  };
  const uint64_t stage = kq::super_block(w.type) ? kq::block_bytes(w.type) : kPKB * uint64_t(kq::block_bytes(w.type));
  p.vec4 = aligned(4);
  p.vec16 = aligned(16) && stage % 16 == 0;
}

}  // namespace

void dense(const model::Mat& w, const uint8_t* act, uint64_t act_stride, int64_t n_tok, float* y, cudaStream_t stream,
           Tile tile) {
  check_common(w, act, act_stride, y);
  DF_CHECK(n_tok > 0 && n_tok <= 0x7fffffff);
  int bm = tile.rows, bn = tile.tokens;
  if (bm == 0 && bn == 0) {
    // The largest tile whose grid still gives every SM a block; else the one with the most blocks.
    const int64_t sms = sm_count();
    bm = 64, bn = 32;
    for (auto [m, n] : {std::pair{128, 64}, {64, 64}, {128, 32}}) {
      if ((n == 64 && n_tok <= 32) || (m == 128 && kq::piece_type(w.type))) continue;
      if ((w.rows + m - 1) / m * ((n_tok + n - 1) / n) >= sms) {
        bm = m, bn = n;
        break;
      }
    }
  }
  DF_CHECK((bm == 64 || bm == 128) && (bn == 32 || bn == 64));
  const int64_t gx = (w.rows + bm - 1) / bm, gy = (n_tok + bn - 1) / bn;
  DF_CHECK(gx <= 0x7fffffff && gy <= 65535);
  Params p;
  p.w = w.data;
  p.rows = w.rows;
  p.nb = w.cols / dev::kQK;
  p.row_bytes = w.row_bytes;
  p.act = act;
  p.act_stride = act_stride;
  p.n_tok = n_tok;
  p.y = y;
  set_alignment(p, w, 0);
  launch_shape(bm, bn, w.type, p, unsigned(gx), unsigned(gy), stream);
}

void grouped(const GroupedArgs& a) {
  check_common(a.w, a.act, a.act_stride, a.y);
  DF_CHECK(a.order != nullptr && a.tiles != nullptr && a.n_expert > 0 && a.act_div >= 1);
  DF_CHECK(a.tile_slots >= 1 && a.tile_slots <= kMaxBN && a.max_tiles > 0 && a.max_tiles <= 0x7fffffff);
  DF_CHECK(a.expert_stride >= uint64_t(a.w.rows) * a.w.row_bytes);
  const bool pieces = kq::piece_type(a.w.type);
  const int bm = a.tile.rows != 0 ? a.tile.rows : pieces ? 64 : 128;
  // Runs of `group` plan tiles of one expert per item: at most group * tile_slots <= bn slots, at most 32 tiles (a
  // warp counts them). The piece types take items of 32: every warp decodes weights, but those past an item's
  // slots have no products to do, and an expert of the 30B shape's prefill averages 32 slots.
  int bn = a.tile.tokens != 0 ? a.tile.tokens : pieces ? 32 : kMaxBN;
  DF_CHECK((bm == 64 || bm == 128) && (bn == 32 || bn == 64) && a.tile_slots <= bn);
  const int group = std::min(bn / int(a.tile_slots), 32);
  if (a.tile.tokens == 0 && group * a.tile_slots <= 32) bn = 32;
  const int64_t gx = (a.w.rows + bm - 1) / bm;
  DF_CHECK(gx <= 0x7fffffff);
  // A block column per plan tile record: the hardware hands the blocks out as SMs free up, which balances the items
  // (a smaller grid looping over items at a fixed stride would leave some blocks with about twice the average number
  // of items at the 30B shape); absorbed and unused records leave after reading the plan.
  const int64_t gy = std::min<int64_t>(a.max_tiles, 65535);
  Params p;
  p.w = a.w.data;
  p.expert_stride = a.expert_stride;
  p.n_expert = a.n_expert;
  p.rows = a.w.rows;
  p.nb = a.w.cols / dev::kQK;
  p.row_bytes = a.w.row_bytes;
  p.act = a.act;
  p.act_stride = a.act_stride;
  p.order = a.order;
  p.tiles = a.tiles;
  p.group = group;
  p.act_div = a.act_div;
  p.y = a.y;
  set_alignment(p, a.w, a.expert_stride);
  launch_shape(bm, bn, a.w.type, p, unsigned(gx), unsigned(gy), a.stream);
}

}  // namespace df::cuda::mmq
