// Prefill products on the int8 tensor cores (mma.sync m16n8k32, sm_80 and later): Q4_0 / Q8_0 weights times Q8_0
// activations. k = 32 is one quant block, so one MMA yields the exact integer block dots of a 16-row x 8-token tile;
// each is scaled and accumulated as fma(d_w * d_a, float(dot), acc), the arithmetic of matmul.cu's dp4a kernel, with
// the blocks summed in index order instead of lane-strided and warp-reduced (only the f32 summation order differs).
//
// A block of 4 warps computes 64 weight rows x BN tokens (BN 32 or 64); warp (wm, wn) a 32-row x BN/2-token quarter
// as 2 x BN/16 MMA tiles. K runs in stages of 4 quant blocks: the next stage's raw blocks are loaded into registers
// while the current one multiplies from shared memory (two buffers, one barrier per stage). Shared layout per buffer:
//   w  [64 rows][4 blocks x 32 int8 + 16 pad]   Q4_0 unpacked to signed int8 (nibble - 8), Q8_0 copied
//   a  [BN tokens][4 blocks x 32 int8 + 16 pad]
//   dw [4][64 + 8] f32, da [4][BN + 8] f32      the blocks' scales
// Rows of 144 bytes put the 8 rows that one ldmatrix phase reads into distinct banks. Rows past the matrix, tokens
// past the tile and blocks past the row are zeros with scale 0, and their results are never stored.
//
// Quant blocks are 18 or 34 bytes long and so only 2-byte aligned: global reads are 16-bit words (dev::load_i32_a2).
#include "backend/cuda/common.cuh"
#include "backend/cuda/mmq.cuh"
#include "diskformer/backend/cuda/check.h"
#include "diskformer/util/check.h"

namespace df::cuda::mmq {

using gguf::GgmlType;

namespace {

constexpr int kThreads = 128;                // 4 warps
constexpr int kBM = 64;                      // weight rows per block
constexpr int kKB = 4;                       // quant blocks per stage
constexpr int kRowBytes = kKB * 32 + 16;     // shared row: 4 blocks of int8 + pad
constexpr int kLoadRows = kThreads / kKB;    // rows (or tokens) one pass of the block's threads loads

template <int BN>
struct Smem {
  alignas(16) int8_t w[2][kBM * kRowBytes];
  alignas(16) int8_t a[2][BN * kRowBytes];
  float dw[2][kKB][kBM + 8];
  alignas(8) float da[2][kKB][BN + 8];
  int32_t src[BN];  // activation row of each block column
  int32_t dst[BN];  // output row of each block column
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
  int32_t act_div = 1;
  float* y = nullptr;
};

// One thread's share of a stage's raw blocks: weight rows tid / 4 + 32 i, activation rows likewise, block tid % 4.
template <GgmlType T, int BN>
struct Stage {
  static constexpr int kWPer = kBM * kKB / kThreads;
  static constexpr int kAPer = BN * kKB / kThreads;
  static constexpr int kWWords = T == GgmlType::Q4_0 ? 4 : 8;
  static constexpr int kWBytes = T == GgmlType::Q4_0 ? dev::kQ4Bytes : dev::kQ8Bytes;
  uint32_t wq[kWPer][kWWords];
  uint16_t wd[kWPer];
  uint32_t aq[kAPer][8];
  uint16_t ad[kAPer];
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const int8_t* p) {
  const uint32_t addr = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// c = A (16 x 32, row-major fragment a) * B (32 x 8, column-major fragment b0, b1), int32, from zero.
__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}

// float(v), exact for |v| < 2^22 (a block dot is at most 32 * 128 * 128 = 2^19): the 1.5 * 2^23 bias trick costs an
// integer add and a float subtract instead of the quarter-rate conversion, in the loop's hottest part.
__device__ __forceinline__ float block_dot_to_float(int v) { return __int_as_float(0x4B400000 + v) - 12582912.0f; }

// Block b of the thread's rows (nullptr: past the matrix or the tile); in_k false: past the row end. Both read as
// zeros.
template <GgmlType T, int BN>
__device__ __forceinline__ void load_stage(Stage<T, BN>& st, const uint8_t* const (&wrow)[Stage<T, BN>::kWPer],
                                           const uint8_t* const (&arow)[Stage<T, BN>::kAPer], int64_t b, bool in_k) {
  using S = Stage<T, BN>;
#pragma unroll
  for (int i = 0; i < S::kWPer; ++i) {
    if (wrow[i] != nullptr && in_k) {
      const uint8_t* p = wrow[i] + b * S::kWBytes;
      st.wd[i] = *reinterpret_cast<const uint16_t*>(p);
#pragma unroll
      for (int k = 0; k < S::kWWords; ++k) st.wq[i][k] = uint32_t(dev::load_i32_a2(p + 2 + 4 * k));
    } else {
      st.wd[i] = 0;
#pragma unroll
      for (int k = 0; k < S::kWWords; ++k) st.wq[i][k] = T == GgmlType::Q4_0 ? 0x88888888u : 0u;  // zeros after - 8
    }
  }
#pragma unroll
  for (int i = 0; i < S::kAPer; ++i) {
    if (arow[i] != nullptr && in_k) {
      const uint8_t* p = arow[i] + b * dev::kQ8Bytes;
      st.ad[i] = *reinterpret_cast<const uint16_t*>(p);
#pragma unroll
      for (int k = 0; k < 8; ++k) st.aq[i][k] = uint32_t(dev::load_i32_a2(p + 2 + 4 * k));
    } else {
      st.ad[i] = 0;
#pragma unroll
      for (int k = 0; k < 8; ++k) st.aq[i][k] = 0;
    }
  }
}

template <GgmlType T, int BN>
__device__ __forceinline__ void store_stage(const Stage<T, BN>& st, Smem<BN>& sm, int buf, int tid) {
  using S = Stage<T, BN>;
  const int kb = tid % kKB;
#pragma unroll
  for (int i = 0; i < S::kWPer; ++i) {
    const int r = tid / kKB + kLoadRows * i;
    uint4* d = reinterpret_cast<uint4*>(sm.w[buf] + r * kRowBytes + kb * 32);
    if constexpr (T == GgmlType::Q4_0) {
      // Byte j of the 16 holds element j (low nibble) and j + 16 (high nibble).
      uint32_t lo[4], hi[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        lo[k] = __vsubss4(st.wq[i][k] & 0x0f0f0f0fu, 0x08080808u);
        hi[k] = __vsubss4((st.wq[i][k] >> 4) & 0x0f0f0f0fu, 0x08080808u);
      }
      d[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      d[1] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    } else {
      d[0] = make_uint4(st.wq[i][0], st.wq[i][1], st.wq[i][2], st.wq[i][3]);
      d[1] = make_uint4(st.wq[i][4], st.wq[i][5], st.wq[i][6], st.wq[i][7]);
    }
    sm.dw[buf][kb][r] = dev::f16_to_f32(st.wd[i]);
  }
#pragma unroll
  for (int i = 0; i < S::kAPer; ++i) {
    const int n = tid / kKB + kLoadRows * i;
    uint4* d = reinterpret_cast<uint4*>(sm.a[buf] + n * kRowBytes + kb * 32);
    d[0] = make_uint4(st.aq[i][0], st.aq[i][1], st.aq[i][2], st.aq[i][3]);
    d[1] = make_uint4(st.aq[i][4], st.aq[i][5], st.aq[i][6], st.aq[i][7]);
    sm.da[buf][kb][n] = dev::f16_to_f32(st.ad[i]);
  }
}

// The warp's 32 x BN/2 quarter over the first kbn blocks of shared buffer buf. Fragment layouts (PTX ISA, mma
// m16n8k32 .s8): with g = lane / 4 and q = lane % 4, A register 0..3 holds row g / g+8 / g / g+8 at bytes 4q.. of k
// half 0 / 0 / 1 / 1; B register 0 / 1 token g at bytes 4q.. of k half 0 / 1; C 0..3 row g / g / g+8 / g+8, token
// 2q / 2q+1 / 2q / 2q+1. ldmatrix.x4 hands lane l word l % 4 of row l / 4 of matrix 0..3, the matrices' row
// addresses coming from lanes 0-7, 8-15, 16-23, 24-31.
template <int BN>
__device__ __forceinline__ void multiply_stage(const Smem<BN>& sm, int buf, int kbn, int wm, int wn, int lane,
                                               float (&acc)[2][BN / 16][4]) {
  constexpr int kNT = BN / 16;  // 8-token MMA tiles per warp
  const int g = lane / 4, q = lane % 4;
  // A matrices: rows +0-7 / +8-15 / +0-7 / +8-15, k half 0 / 0 / 1 / 1.
  const int8_t* wbase = sm.w[buf] + (wm * 32 + (lane & 7) + ((lane >> 3) & 1) * 8) * kRowBytes + (lane >> 4) * 16;
  // B matrices: tokens +0-7 / +0-7 / +8-15 / +8-15, k half 0 / 1 / 0 / 1 (two 8-token tiles per ldmatrix).
  const int8_t* abase = sm.a[buf] + (wn * (BN / 2) + (lane & 7) + (lane >> 4) * 8) * kRowBytes + ((lane >> 3) & 1) * 16;
#pragma unroll
  for (int kb = 0; kb < kKB; ++kb) {
    if (kb < kbn) {
      uint32_t af[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) ldmatrix_x4(af[i], wbase + i * 16 * kRowBytes + kb * 32);
      uint32_t bf[kNT][2];
#pragma unroll
      for (int j2 = 0; j2 < kNT / 2; ++j2) {
        uint32_t r[4];
        ldmatrix_x4(r, abase + j2 * 16 * kRowBytes + kb * 32);
        bf[2 * j2][0] = r[0];
        bf[2 * j2][1] = r[1];
        bf[2 * j2 + 1][0] = r[2];
        bf[2 * j2 + 1][1] = r[3];
      }
      float dw[2][2];
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
          int c[4];
          mma_s8(c, af[i], bf[j][0], bf[j][1]);
          acc[i][j][0] = fmaf(dw[i][0] * da[j].x, block_dot_to_float(c[0]), acc[i][j][0]);
          acc[i][j][1] = fmaf(dw[i][0] * da[j].y, block_dot_to_float(c[1]), acc[i][j][1]);
          acc[i][j][2] = fmaf(dw[i][1] * da[j].x, block_dot_to_float(c[2]), acc[i][j][2]);
          acc[i][j][3] = fmaf(dw[i][1] * da[j].y, block_dot_to_float(c[3]), acc[i][j][3]);
        }
    }
  }
}

// grid: (ceil(rows / 64), dense ? ceil(n_tok / BN) : max tiles); blocks past the plan's tile count leave.
template <GgmlType T, int BN>
__global__ void __launch_bounds__(kThreads) mmq_kernel(const Params p) {
  using S = Stage<T, BN>;
  __shared__ Smem<BN> sm;
  const int tid = threadIdx.x;
  const uint8_t* w = p.w;
  int cnt;
  if (p.tiles != nullptr) {
    const int ty = blockIdx.y;
    if (ty >= p.tiles[0]) return;  // the whole block: before any barrier
    const int32_t e = p.tiles[1 + 3 * ty], first = p.tiles[2 + 3 * ty];
    cnt = p.tiles[3 + 3 * ty];
    if (e < 0 || e >= p.n_expert || cnt < 1 || cnt > BN) __trap();  // a corrupt plan: a bug
    w += uint64_t(e) * p.expert_stride;
    for (int n = tid; n < cnt; n += kThreads) {
      const int32_t v = p.order[first + n];
      sm.src[n] = v / p.act_div;
      sm.dst[n] = v;
    }
  } else {
    const int64_t t0 = int64_t(blockIdx.y) * BN;
    cnt = int(min(int64_t(BN), p.n_tok - t0));
    for (int n = tid; n < cnt; n += kThreads) sm.src[n] = sm.dst[n] = int32_t(t0 + n);
  }
  __syncthreads();

  const int64_t m0 = int64_t(blockIdx.x) * kBM;
  const uint8_t* wrow[S::kWPer];
#pragma unroll
  for (int i = 0; i < S::kWPer; ++i) {
    const int64_t r = m0 + tid / kKB + kLoadRows * i;
    wrow[i] = r < p.rows ? w + r * p.row_bytes : nullptr;
  }
  const uint8_t* arow[S::kAPer];
#pragma unroll
  for (int i = 0; i < S::kAPer; ++i) {
    const int n = tid / kKB + kLoadRows * i;
    arow[i] = n < cnt ? p.act + uint64_t(sm.src[n]) * p.act_stride : nullptr;
  }
  const int warp = tid / 32, lane = tid % 32;
  const int wm = warp % 2, wn = warp / 2;
  float acc[2][BN / 16][4] = {};
  const int64_t n_stages = (p.nb + kKB - 1) / kKB;
  Stage<T, BN> st;
  load_stage<T, BN>(st, wrow, arow, tid % kKB, tid % kKB < p.nb);
  store_stage<T, BN>(st, sm, 0, tid);
  __syncthreads();
  for (int64_t s = 0; s < n_stages; ++s) {
    const bool more = s + 1 < n_stages;
    if (more) {
      const int64_t b = (s + 1) * kKB + tid % kKB;
      load_stage<T, BN>(st, wrow, arow, b, b < p.nb);
    }
    multiply_stage<BN>(sm, int(s & 1), int(min(int64_t(kKB), p.nb - s * kKB)), wm, wn, lane, acc);
    // The other buffer was last read by the previous stage's multiply, which every thread finished before the
    // barrier that ended it.
    if (more) store_stage<T, BN>(st, sm, int((s + 1) & 1), tid);
    __syncthreads();
  }

  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < BN / 16; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t r = m0 + wm * 32 + i * 16 + (c / 2) * 8 + g;
        const int n = wn * (BN / 2) + j * 8 + 2 * q + (c % 2);
        if (r < p.rows && n < cnt) p.y[int64_t(sm.dst[n]) * p.rows + r] = acc[i][j][c];
      }
}

bool mma_type(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q8_0; }

template <int BN>
void launch(GgmlType t, const Params& p, dim3 grid, cudaStream_t stream) {
  switch (t) {
    case GgmlType::Q4_0: mmq_kernel<GgmlType::Q4_0, BN><<<grid, kThreads, 0, stream>>>(p); break;
    case GgmlType::Q8_0: mmq_kernel<GgmlType::Q8_0, BN><<<grid, kThreads, 0, stream>>>(p); break;
    default: DF_CHECK(false);
  }
  DF_CUDA_CHECK_LAUNCH();
}

void check_common(const DMat& w, const uint8_t* act, uint64_t act_stride, const float* y) {
  DF_CHECK(mma_type(w.type) && w.data != nullptr && w.rows > 0 && w.cols > 0 && w.cols % dev::kQK == 0);
  DF_CHECK(act != nullptr && y != nullptr);
  // 16-bit reads of weights and activations.
  DF_CHECK(reinterpret_cast<uintptr_t>(w.data) % 2 == 0 && w.row_bytes % 2 == 0);
  DF_CHECK(reinterpret_cast<uintptr_t>(act) % 2 == 0 && act_stride % 2 == 0);
  DF_CHECK(act_stride >= uint64_t(w.cols / dev::kQK) * dev::kQ8Bytes);
}

}  // namespace

void dense(const DMat& w, const uint8_t* act, uint64_t act_stride, int64_t n_tok, float* y, cudaStream_t stream) {
  check_common(w, act, act_stride, y);
  DF_CHECK(n_tok > 0);
  const int bn = n_tok <= 32 ? 32 : 64;
  const int64_t gx = (w.rows + kBM - 1) / kBM, gy = (n_tok + bn - 1) / bn;
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
  const dim3 grid{unsigned(gx), unsigned(gy)};
  if (bn == 32) {
    launch<32>(w.type, p, grid, stream);
  } else {
    launch<64>(w.type, p, grid, stream);
  }
}

void grouped(const GroupedArgs& a) {
  check_common(a.w, a.act, a.act_stride, a.y);
  DF_CHECK(a.order != nullptr && a.tiles != nullptr && a.n_expert > 0 && a.act_div >= 1);
  DF_CHECK(a.tile_slots >= 1 && a.tile_slots <= 64 && a.max_tiles > 0);
  DF_CHECK(a.expert_stride >= uint64_t(a.w.rows) * a.w.row_bytes);
  const int bn = a.tile_slots <= 32 ? 32 : 64;
  const int64_t gx = (a.w.rows + kBM - 1) / kBM;
  DF_CHECK(gx <= 0x7fffffff && a.max_tiles <= 65535);
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
  p.act_div = a.act_div;
  p.y = a.y;
  const dim3 grid{unsigned(gx), unsigned(a.max_tiles)};
  if (bn == 32) {
    launch<32>(a.w.type, p, grid, a.stream);
  } else {
    launch<64>(a.w.type, p, grid, a.stream);
  }
}

}  // namespace df::cuda::mmq
