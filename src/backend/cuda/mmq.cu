// Prefill products on the int8 tensor cores (mma.sync m16n8k32, sm_80 and later): Q4_0 / Q8_0 weights (and the
// piece types, mmq_piece.cu) times Q8_0 activations. k = 32 is one quant block, so one MMA yields the exact integer block
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
// Grouped Q8_0 experts take mmq_piece.cu's kernel by default, and Q4_0 experts where they average at most 16 slots:
// with few slots an expert (Qwen3.6-35B-A3B's 256 experts average 16 of a 512-token prompt's) the products are bound
// by the weights' reads, and its stages of 8 blocks, copied 16 bytes at a time into shared memory while the stage
// before is multiplied, read them faster (on an H100 at that shape Q8_0 at 960-980 against 590-610 GB/s, Q4_0 at
// 700-780 against 560-620). With 32 slots an expert (the 30B shape's 128) this kernel's 128 x 64 tiles read Q4_0 faster
// (520-560 against 490-510 GB/s; Gemma 4 26B-A4B prefilled 8,750 against 8,250 tok/s). The two compute the same block
// terms in the same order, so their results are equal bit for bit (CudaMmqGrouped compares every tile shape).
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
#include "backend/cuda/mmq_tile.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/util/check.h"

namespace df::cuda::mmq {

using gguf::GgmlType;
namespace {

constexpr int kKB = 4;                   // quant blocks per stage
constexpr int kRowBytes = kKB * 32 + 16;  // shared row: 4 blocks of int8 + pad

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

// Bytes of 4 nibbles (0..15) minus 8 as int8, without borrows between bytes: n + 0x78 <= 0x87, then flipping bit 7
// subtracts 128.
__device__ __forceinline__ uint32_t nibbles_minus_8(uint32_t n) { return (n + 0x78787878u) ^ 0x80808080u; }

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

bool mma_type(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q8_0 || kq::piece_type(t); }

// The Q4_0 and Q8_0 kernels take every tile; the piece types 64-row tiles (mmq_piece.cu).
template <int BM, int BN>
void launch(GgmlType t, const Params& p, unsigned gx, unsigned gy, cudaStream_t stream) {
  switch (t) {
    case GgmlType::Q4_0:
      launch_tile_kernel<BM>(mmq_kernel<GgmlType::Q4_0, BM, BN>, int(sizeof(Smem<BM, BN>)), p, gx, gy, stream);
      return;
    case GgmlType::Q8_0:
      launch_tile_kernel<BM>(mmq_kernel<GgmlType::Q8_0, BM, BN>, int(sizeof(Smem<BM, BN>)), p, gx, gy, stream);
      return;
    default: break;
  }
  DF_CHECK_MSG(launch_pieces(t, BM, BN, p, gx, gy, stream), "mmq: no kernel for this weight type and tile");
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

}  // namespace

void dense(const model::Mat& w, const uint8_t* act, uint64_t act_stride, int64_t n_tok, float* y, cudaStream_t stream,
           Tile tile) {
  check_common(w, act, act_stride, y);
  DF_CHECK(n_tok > 0 && n_tok <= 0x7fffffff);
  int bm = tile.rows, bn = tile.tokens;
  // As in grouped(): an explicit 64-row tile is the piece kernel's, a 128-row one this file's (so the tests and the
  // throughput prints reach both kernels for Q4_0 and Q8_0, whose results are equal bit for bit).
  const bool pieces = bm != 0 ? bm == 64 : kq::piece_type(w.type);
  if (bm == 0 && bn == 0) {
    // The largest tile whose grid still gives every SM a block; else the one with the most blocks.
    const int64_t sms = sm_count();
    bm = 64, bn = 32;
    for (auto [m, n] : {std::pair{128, 64}, {64, 64}, {128, 32}}) {
      if ((n == 64 && n_tok <= 32) || (m == 128 && pieces)) continue;
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
  set_piece_alignment(p, w, 0);
  if (pieces) {
    DF_CHECK_MSG(launch_pieces(w.type, bm, bn, p, unsigned(gx), unsigned(gy), stream),
                 "mmq: no piece kernel for this weight type and tile");
  } else {
    launch_shape(bm, bn, w.type, p, unsigned(gx), unsigned(gy), stream);
  }
}

void grouped(const GroupedArgs& a) {
  check_common(a.w, a.act, a.act_stride, a.y);
  DF_CHECK(a.order != nullptr && a.tiles != nullptr && a.n_expert > 0 && a.act_div >= 1);
  DF_CHECK(a.tile_slots >= 1 && a.tile_slots <= kMaxBN && a.max_tiles > 0 && a.max_tiles <= 0x7fffffff);
  DF_CHECK(a.expert_stride >= uint64_t(a.w.rows) * a.w.row_bytes);
  // The piece kernel's 64-row tiles or this file's kernel's 128-row ones, as asked, else by type and slots an expert
  // (the comment at the top says why); the piece types have no 128-row tiles.
  const bool few_slots = a.n_slots > 0 && a.n_slots <= 16 * int64_t(a.n_expert);
  const bool pieces = a.tile.rows != 0 ? a.tile.rows != 128 : a.w.type != GgmlType::Q4_0 || few_slots;
  const int bm = pieces ? 64 : 128;
  // Runs of `group` plan tiles of one expert per item: at most group * tile_slots <= bn slots, at most 32 tiles (a
  // warp counts them). The piece kernel takes items of 32 (of 64 where a plan tile is longer): every warp decodes
  // weights, but those past an item's slots have no products to do, and an expert of the 30B shape's prefill
  // averages 32 slots.
  int bn = a.tile.tokens != 0 ? a.tile.tokens : pieces && a.tile_slots <= 32 ? 32 : kMaxBN;
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
  set_piece_alignment(p, a.w, a.expert_stride);
  if (pieces) {
    DF_CHECK_MSG(launch_pieces(a.w.type, bm, bn, p, unsigned(gx), unsigned(gy), a.stream),
                 "mmq: no piece kernel for this weight type and tile");
  } else {
    launch_shape(bm, bn, a.w.type, p, unsigned(gx), unsigned(gy), a.stream);
  }
}

}  // namespace df::cuda::mmq
