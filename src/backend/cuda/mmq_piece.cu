// The int8 tensor-core products (mmq.cu's scheme) for the piece types (kquant.cuh): K-quants, IQ4 and the
// 32-element offset types.
//
// A stage is 8 pieces of 32 (one super-block, or 8 blocks of the 32-element types), and the weights are not unpacked
// on their way through registers: their rows' raw bytes of the next stage are copied into shared memory
// asynchronously (cp.async: 4-byte words of the aligned window over each row's stage, the blocks being only 2-byte
// aligned, or 16-byte chunks where every stage starts 16-byte aligned, as Q4_K's 144-byte ones do in rows of a
// multiple of 16 bytes), and after the barrier each thread decodes two pieces of each of its rows from there with
// kquant.cuh's decoder (whole words where the rows are 4-byte aligned, 16 bytes at a time where 16-byte aligned; the
// paired types' two pieces from one read of the words they share) into the int8 tile the MMAs read, with each
// piece's scales and offsets beside it. One tile buffer and two raw buffers: a stage's copies overlap the decoding and
// the products of the one before. The activations come through registers as in mmq.cu's kernel. The offsets' terms
// need each block half's sum of activation codes: one more MMA, of a constant 0/1 matrix with the activation
// fragments, forms them in the registers where the block terms are summed (shuffles would load the shared-memory
// pipe that bounds the kernel).
//
// Each 32-element block's term is then, with dot_h the integer dot of half h and s_h the activations' code sum:
//   types with one scale per piece:  da * (d * dot + m * (s_0 + s_1))           (one k32 MMA)
//   Q2_K, Q3_K, Q6_K (per-16 scales): da * (d_0 * dot_0 + d_1 * dot_1 + m_0 * s_0 + m_1 * s_1)  (two k16 MMAs)
// d * dot comes out of the biased accumulator exactly rounded, as for Q4_0 (d - a scale times an f16 - has at most 19
// significant bits, so -d * 1.5 * 2^23 is exact); the single-scale types' block terms equal the dp4a kernels'
// (kq::piece_dot) bit for bit, and only the order of the sum over blocks differs. The scales are packed so that a
// piece's weight side is one 16- or 8-byte read and a token's one 4-, 8- or 16-byte read: the products are bound by
// the shared memory's pipe, and that also keeps Q4_K's 64 x 32 tile within four blocks per SM.
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kquant.cuh"
#include "backend/cuda/mmq_tile.cuh"
#include "diskformer/util/check.h"

namespace df::cuda::mmq {

using gguf::GgmlType;

namespace {

constexpr int kPKB = 8;                     // pieces per stage
constexpr int kPRowBytes = kPKB * 32 + 16;  // shared row: 8 pieces of int8 + pad (68 words: 4 mod 32, as mmq.cu's kRowBytes)

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
//   tokens:  d_a (the offsets' code sums come from an MMA: multiply_pieces).
template <GgmlType T>
struct PieceScales {
  static constexpr bool kHalves = kq::half_scales(T), kOffset = kq::has_offset(T);
  using W = std::conditional_t<kHalves || kOffset, float4, float2>;
};

template <GgmlType T, int BM, int BN>
struct PieceSmem {
  using Sc = PieceScales<T>;
  int8_t w[BM * kPRowBytes];
  int8_t a[BN * kPRowBytes];
  typename Sc::W ws[kPKB][BM];
  float2 wm[Sc::kHalves && Sc::kOffset ? kPKB : 1][BM];
  float as[kPKB][BN];
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

using dev::cp_async16;
using dev::cp_async4;
using dev::cp_async_commit;
using dev::cp_async_wait_all;

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

// Raw buffer buf (stage s) decoded into the weight tile: warp k takes pieces kq::pair_piece(T, k, 0 and 1) of rows
// lane + 32 * i (consecutive rows in a warp: its stores and 16-byte reads fall in distinct banks). Rows past the
// matrix and pieces past the row end are zeros with scale 0. vec4: every row starts 4-byte aligned (the windows start
// at the stages, and the types with word_aligned_blocks read whole words); vec16: 16-byte aligned.
template <GgmlType T, int BM, int BN>
__device__ __forceinline__ void decode_pieces(PieceSmem<T, BM, BN>& sm, const Item& it, int s, int buf, int tid,
                                              bool vec4, bool vec16) {
  using Sc = PieceScales<T>;
  static_assert(threads_of<BM>() == 32 * kPKB / 2);
  const int W = raw_stride<T>(vec16);
  const int k = tid / 32, lane = tid % 32;
  const int kb[2] = {kq::pair_piece(T, k, 0), kq::pair_piece(T, k, 1)};
#pragma unroll
  for (int i = 0; i < BM / 32; ++i) {
    const int r = lane + 32 * i;
    kq::Piece pc[2] = {};
    if (r < it.rows_left) {
      const uint8_t* raw = reinterpret_cast<const uint8_t*>(&sm.raw[buf][r * W]);
      const uint8_t* row = it.w + uint32_t(r) * it.row_bytes + uint32_t(s) * stage_bytes<T>();
      const uint8_t* un = raw + (reinterpret_cast<uintptr_t>(row) & 3u);  // the window's copy of the stage start
      if constexpr (kq::paired(T)) {
        // A super-block is a whole stage: every piece lies inside the row.
        bool done = false;
        if constexpr (kq::word_aligned_blocks(T)) {
          if constexpr (stage_bytes<T>() % 16 == 0) {
            if (vec16) {
              kq::piece_pair<T, true, true>(raw, k, pc);
              done = true;
            }
          }
          if (!done && vec4) {
            kq::piece_pair<T, true>(raw, k, pc);
            done = true;
          }
        }
        if (!done) kq::piece_pair<T>(un, k, pc);
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (s * kPKB + kb[h] >= it.nb) continue;
          bool whole = false;
          if constexpr (kq::word_aligned_blocks(T)) {
            if (vec4) {
              pc[h] = kq::piece<T, true>(raw, kb[h]);
              whole = true;
            }
          }
          if (!whole) pc[h] = kq::piece<T>(un, kb[h]);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int4* dst = reinterpret_cast<int4*>(sm.w + r * kPRowBytes + kb[h] * 32);
      dst[0] = {pc[h].q[0], pc[h].q[1], pc[h].q[2], pc[h].q[3]};
      dst[1] = {pc[h].q[4], pc[h].q[5], pc[h].q[6], pc[h].q[7]};
      if constexpr (Sc::kHalves) {
        sm.ws[kb[h]][r] = {pc[h].d[0], -pc[h].d[0] * kBias, pc[h].d[1], -pc[h].d[1] * kBias};
        if constexpr (Sc::kOffset) sm.wm[kb[h]][r] = {pc[h].m[0], pc[h].m[1]};
      } else if constexpr (Sc::kOffset) {
        sm.ws[kb[h]][r] = {pc[h].d[0], -pc[h].d[0] * kBias, pc[h].m[0], 0.0f};
      } else {
        sm.ws[kb[h]][r] = {pc[h].d[0], -pc[h].d[0] * kBias};
      }
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

// The activation words into the tile and their blocks' scales beside it.
template <GgmlType T, int BM, int BN>
__device__ __forceinline__ void store_act(const PieceAct<BM, BN>& st, PieceSmem<T, BM, BN>& sm, int tid) {
  using A = PieceAct<BM, BN>;
  const int lane = tid % 32, warp = tid / 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int kb = lane / 8 + 4 * h, wi = lane % 8;
#pragma unroll
    for (int i = 0; i < A::kPer; ++i) {
      const int n = warp + A::kWarps * i;
      *reinterpret_cast<uint32_t*>(sm.a + n * kPRowBytes + kb * 32 + 4 * wi) = st.q[i][h];
    }
  }
#pragma unroll
  for (int i = 0; i < A::kScales; ++i) {
    const int t = tid + A::kThreads * i;
    if (t < BN * kPKB) sm.as[t % kPKB][t / kPKB] = dev::f16_to_f32(st.d[i]);
  }
}
// c = kBiasBits + A (16 x 16) * B (16 x 8), int32: one half of a piece (fragments as m16n8k32's k half).
__device__ __forceinline__ void mma_s8_k16_biased(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(b), "r"(kBiasBits));
}

// c = A (16 x 32) * B (32 x 8) with A's rows 0-7 ones over k 0-15 and rows 8-15 ones over k 16-31: c[0], c[1] the
// first half's code sums of B's columns 2q and 2q + 1, c[2], c[3] the second half's (the activations' half sums).
__device__ __forceinline__ void mma_half_sums(int (&c)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %5, %4}, {%6, %7}, "
      "{%5, %5, %5, %5};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(0x01010101u), "r"(0u), "r"(b0), "r"(b1));
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
    float2 ts[kNT];  // tokens 2q and 2q + 1's scales
    int hs[kNT][4];  // their half sums (mma_half_sums)
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      ts[j] = *reinterpret_cast<const float2*>(&sm.as[kb][wn * (BN / 2) + j * 8 + 2 * q]);
      if constexpr (Sc::kOffset) {
        if (kFull || j * 8 < n_valid) mma_half_sums(hs[j], bf[j][0], bf[j][1]);
      }
    }
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
          const float da = c % 2 == 0 ? ts[j].x : ts[j].y;
          float t = fmaf(w.x, __int_as_float(c0[c]), w.y);
          if constexpr (Sc::kHalves) {
            t = __fadd_rn(t, fmaf(w.z, __int_as_float(c1[c]), w.w));
            if constexpr (Sc::kOffset) {
              t = fmaf(wm2[i][c / 2].x, float(hs[j][c % 2]), t);
              t = fmaf(wm2[i][c / 2].y, float(hs[j][2 + c % 2]), t);
            }
          } else if constexpr (Sc::kOffset) {
            t = fmaf(w.z, float(hs[j][c % 2] + hs[j][2 + c % 2]), t);  // m * (s_0 + s_1)
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

template <GgmlType T, int BN>
void launch_piece_t(const Params& p, unsigned gx, unsigned gy, cudaStream_t stream) {
  launch_tile_kernel<64>(mmq_piece_kernel<T, 64, BN>, int(sizeof(PieceSmem<T, 64, BN>)), p, gx, gy, stream);
}

template <int BN>
bool launch_piece_bn(GgmlType t, const Params& p, unsigned gx, unsigned gy, cudaStream_t stream) {
  switch (t) {
#define DF_MMQ_PIECE(T) \
  case T: launch_piece_t<T, BN>(p, gx, gy, stream); return true;
    DF_MMQ_PIECE(GgmlType::Q4_0)
    DF_MMQ_PIECE(GgmlType::Q8_0)
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
    default: return false;
  }
}

}  // namespace

bool launch_pieces(GgmlType t, int bm, int bn, const Params& p, unsigned gx, unsigned gy, cudaStream_t stream) {
  if (bm != 64) return false;  // their shared memory holds the raw stages too: 64-row tiles only
  return bn == 64 ? launch_piece_bn<64>(t, p, gx, gy, stream) : launch_piece_bn<32>(t, p, gx, gy, stream);
}

void set_piece_alignment(Params& p, const model::Mat& w, uint64_t expert_stride) {
  auto aligned = [&](uint64_t n) {
    return reinterpret_cast<uintptr_t>(w.data) % n == 0 && w.row_bytes % n == 0 && expert_stride % n == 0;
  };
  const uint64_t stage = kq::super_block(w.type) ? kq::block_bytes(w.type) : kPKB * uint64_t(kq::block_bytes(w.type));
  p.vec4 = aligned(4);
  p.vec16 = aligned(16) && stage % 16 == 0;
}

}  // namespace df::cuda::mmq
