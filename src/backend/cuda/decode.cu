// Decode kernels: the products and element-wise steps of a step of one (or a few) tokens, fused so that a layer
// takes a handful of launches, each reading its weights at close to the memory's speed.
//
// Each warp reads its weight rows straight from global memory, as aligned 4-byte words (a Q4_0 block of 18 bytes
// or a Q8_0 block of 34 starts at byte 0 or 2 of a word), every row of a step loaded before any is used, so that
// many loads are in flight per SM and no shared memory limits occupancy. The Q8_0 activations sit in shared memory
// as 9 words per block (stage_act), which the 32 lanes read without bank conflicts. The dot products then run
// exactly as matmul.cu's row_dot: lane l accumulates blocks l, l + 32, ... in order with the same f32 operations,
// and the warp butterfly reduces the 32 partial sums. So each product equals matmul's bit for bit, and the fused
// epilogues (residual add, SwiGLU, Q8_0 quantization, routed-expert combine) repeat the unfused kernels' roundings.
// The K-quant, IQ4 and offset types (kquant.cuh) take the same kernels with their pieces decoded straight from the
// rows (spans of aligned words, the blocks being 2-byte aligned at best) instead of the word windows, in matmul's
// order too.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kquant.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rms.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

using gguf::GgmlType;

namespace {

constexpr int kMvWarps = 8;                       // decode_matvec: a weight row per warp
constexpr int kMvRows = kMvWarps;
static_assert(kMvRows == kDecodeRowsPerBlock);
constexpr int kGuWarps = 16;                      // moe_decode_gate_up: 32 gate and 32 up rows (one Q8_0 block)
constexpr int kGuRows = 32;
constexpr int kGuRowsPerWarp = kGuRows / kGuWarps;  // of gate, and as many of up
constexpr int kDnWarps = 8;                       // moe_decode_down: an output row per warp, every selected expert
constexpr int kDnRows = kDnWarps;
constexpr int kDnChunk = 8;                       // experts whose rows one step of a warp loads together
constexpr int kMaxUsed = 64;                      // moe_decode_*: selected experts per token
constexpr int kNormThreads = 256;                 // as rms_norm.cu, so the square sums run in the same order
constexpr int kMaxHeadDim = 512;
static_assert(kMaxHeadDim / 2 <= kNormThreads);  // qk_norm_rope_store: a thread per rotated pair
constexpr int kActWords = 9;                      // a staged Q8_0 block: 8 words of int8 quads, then the f32 scale

bool quantized(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q8_0 || kq::piece_type(t); }
__host__ __device__ inline uint64_t q8_bytes(int64_t cols) { return uint64_t(cols / dev::kQK) * dev::kQ8Bytes; }
__host__ __device__ inline uint64_t act_bytes(int64_t cols) { return uint64_t(cols / dev::kQK) * kActWords * 4; }
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Rows the kernels read as aligned words: 16-byte aligned rows (data and row_bytes), which also leaves room for the
// 2 bytes past the last block that its word window may cover (an odd block count leaves the row's used bytes 2 short
// of a multiple of 4).
// The piece types read aligned words over their 2-byte aligned spans (kq::words): rows 2-byte aligned, whole blocks.
bool rows_stageable(const model::Mat& w) {
  if (w.data == nullptr || !quantized(w.type) || w.cols <= 0 || w.rows <= 0) return false;
  if (kq::piece_type(w.type))
    return w.cols % kq::block_elems(w.type) == 0 && reinterpret_cast<uintptr_t>(w.data) % 2 == 0 &&
           w.row_bytes % 2 == 0 && w.row_bytes >= uint64_t(w.cols / kq::block_elems(w.type)) * kq::block_bytes(w.type);
  return w.cols % dev::kQK == 0 && aligned16(w.data) && w.row_bytes % 16 == 0 &&
         w.row_bytes >= uint64_t(w.cols / dev::kQK) * (w.type == GgmlType::Q4_0 ? dev::kQ4Bytes : dev::kQ8Bytes);
}

// The most dynamic shared memory one block of the current device may take.
uint64_t smem_limit() { return uint64_t(device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin)); }

// Kernels past the default 48 KiB of dynamic shared memory must say so (allowed during graph capture: no stream op).
template <typename Kernel>
void allow_smem(Kernel kernel, uint64_t bytes) {
  if (bytes > 48 * 1024)
    DF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// f(std::integral_constant<GgmlType, T>) for a weight type the kernels take.
template <typename F>
void by_type(GgmlType t, F&& f) {
  switch (t) {
#define DF_DECODE_TYPE(T) \
  case T: f(std::integral_constant<GgmlType, T>{}); break;
    DF_DECODE_TYPE(GgmlType::Q4_0)
    DF_DECODE_TYPE(GgmlType::Q8_0)
    DF_DECODE_TYPE(GgmlType::Q4_1)
    DF_DECODE_TYPE(GgmlType::Q5_0)
    DF_DECODE_TYPE(GgmlType::Q5_1)
    DF_DECODE_TYPE(GgmlType::IQ4_NL)
    DF_DECODE_TYPE(GgmlType::Q2_K)
    DF_DECODE_TYPE(GgmlType::Q3_K)
    DF_DECODE_TYPE(GgmlType::Q4_K)
    DF_DECODE_TYPE(GgmlType::Q5_K)
    DF_DECODE_TYPE(GgmlType::Q6_K)
    DF_DECODE_TYPE(GgmlType::IQ4_XS)
#undef DF_DECODE_TYPE
    default: DF_CHECK_MSG(false, "decode kernels: unsupported weight type");
  }
}

// Experts' strides: 16-byte multiples for the word windows of Q4_0/Q8_0, 2-byte ones for the pieces.
bool stride_ok(GgmlType t, uint64_t stride) { return stride % (kq::piece_type(t) ? 2 : 16) == 0; }

// n_blocks Q8_0 blocks (34 bytes each, contiguous, 2-byte aligned) into dst as kActWords words per block: word k < 8
// holds elements 4k .. 4k+3 (as load_i32_a2 reads them), word 8 the f16 scale widened to f32. Lane l reads words
// 9b .. 9b+8 of block b = l + 32i; 9 is odd, so the 32 lanes fall in 32 different banks. Each thread loads a batch
// of words before storing any, so the copy waits for the L2 about once, not once per word. The caller synchronizes.
constexpr int kStageBatch = 8;

__device__ __forceinline__ void stage_act(int* __restrict__ dst, const uint8_t* __restrict__ src, int64_t n_blocks) {
  const int64_t n = n_blocks * kActWords;
  for (int64_t w0 = threadIdx.x; w0 < n; w0 += int64_t(kStageBatch) * blockDim.x) {
    int v[kStageBatch];
#pragma unroll
    for (int i = 0; i < kStageBatch; ++i) {
      const int64_t w = w0 + int64_t(i) * blockDim.x;
      if (w < n) {
        const int64_t b = w / kActWords;
        const int k = int(w - b * kActWords);
        const uint8_t* sb = src + b * dev::kQ8Bytes;
        v[i] = k < 8 ? dev::load_i32_a2(sb + 2 + 4 * k)
                     : __float_as_int(dev::f16_to_f32(*reinterpret_cast<const uint16_t*>(sb)));
      }
    }
#pragma unroll
    for (int i = 0; i < kStageBatch; ++i) {
      const int64_t w = w0 + int64_t(i) * blockDim.x;
      if (w < n) dst[w] = v[i];
    }
  }
}

// One block of 32 values, one per lane (v), into a staged block (dst, kActWords words): quantize_block_q8_0's
// operations, the scale rounded through f16 as the stored block holds it.
__device__ __forceinline__ void quantize_block_act(float v, int* __restrict__ dst, int lane) {
  const float amax = dev::warp_max(fabsf(v));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  reinterpret_cast<int8_t*>(dst)[lane] = int8_t(rintf(v * id));
  if (lane == 0) dst[8] = __float_as_int(dev::f16_to_f32(dev::f32_to_f16(d)));
}

// n_blocks blocks of x (f32, contiguous) quantized into dst in stage_act's layout, a warp per block with
// quantize_block_q8_0's operations (the scale rounded through f16, as the stored block holds it); a warp loads a
// batch of its blocks before quantizing them.
__device__ __forceinline__ void quantize_act(int* __restrict__ dst, const float* __restrict__ x, int64_t n_blocks,
                                             int64_t row_blocks = 1, const dev::Gate& gate = {0, nullptr, 0}) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  for (int64_t b0 = warp; b0 < n_blocks; b0 += int64_t(kStageBatch) * n_warps) {
    float v[kStageBatch];
#pragma unroll
    for (int i = 0; i < kStageBatch; ++i) {
      const int64_t b = b0 + int64_t(i) * n_warps;
      if (b < n_blocks)
        v[i] = dev::gate_value(gate, x[b * dev::kQK + lane], b / row_blocks, (b % row_blocks) * dev::kQK + lane);
    }
#pragma unroll
    for (int i = 0; i < kStageBatch; ++i) {
      const int64_t b = b0 + int64_t(i) * n_warps;
      if (b >= n_blocks) break;  // the whole warp
      quantize_block_act(v[i], dst + b * kActWords, lane);
    }
  }
}

template <GgmlType T>
constexpr int kRawWords = T == GgmlType::Q4_0 ? 5 : T == GgmlType::Q8_0 ? 9 : 1;  // aligned words covering a block

// The aligned words covering block b of a row that starts 4-byte aligned. Weights are read once: no L1 allocation.
template <GgmlType T>
__device__ __forceinline__ void load_raw(const uint8_t* row, int b, uint32_t (&raw)[kRawWords<T>]) {
  const uint32_t o = uint32_t(b) * (T == GgmlType::Q4_0 ? dev::kQ4Bytes : dev::kQ8Bytes);
  const uint32_t* p = reinterpret_cast<const uint32_t*>(row + (o & ~3u));
#pragma unroll
  for (int i = 0; i < kRawWords<T>; ++i) raw[i] = __ldcs(p + i);
}

// Block b's scale and its 32 signed weights as 8 packed int32 (elements 4k .. 4k+3 in wq[k]), from load_raw's
// words: the block starts at byte 2 of the first word when b * block bytes is 2 mod 4, else at byte 0.
template <GgmlType T>
__device__ __forceinline__ float unpack_raw(const uint32_t (&raw)[kRawWords<T>], int b, int (&wq)[8]) {
  const bool odd = ((uint32_t(b) * (T == GgmlType::Q4_0 ? dev::kQ4Bytes : dev::kQ8Bytes)) & 2u) != 0;
  const uint16_t dbits = uint16_t(odd ? raw[0] >> 16 : raw[0] & 0xffffu);
  if constexpr (T == GgmlType::Q4_0) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t q = odd ? raw[k + 1] : __funnelshift_r(raw[k], raw[k + 1], 16);
      wq[k] = int(__vsubss4(q & 0x0f0f0f0fu, 0x08080808u));
      wq[k + 4] = int(__vsubss4((q >> 4) & 0x0f0f0f0fu, 0x08080808u));
    }
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) wq[k] = int(odd ? raw[k + 1] : __funnelshift_r(raw[k], raw[k + 1], 16));
  }
  return dev::f16_to_f32(dbits);
}

// The weight words of one step of rows_dots: U of a lane's blocks (b0, b0 + 32, ...) of each of nr (<= R) rows.
template <GgmlType T, int R, int U>
struct RowsStep {
  uint32_t raw[U][R][kRawWords<T>];
};

__device__ __forceinline__ void prefetch_l2(const uint8_t* p) { asm volatile("prefetch.L2 [%0];" ::"l"(p)); }

// The weight words of a step into s. The piece types decode their blocks where they are used; their blocks' lines
// are fetched into L2 here instead, so that the reads then (after the activations are staged, or for a kernel's
// first rows after the kernel before it has finished) wait for L2 rather than memory.
template <GgmlType T, int R, int U>
__device__ __forceinline__ void load_step(RowsStep<T, R, U>& s, const uint8_t* const (&rows)[R], int nr, int nb,
                                          int b0) {
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int b = b0 + 32 * u;
      if (b >= nb || r >= nr) continue;
      if constexpr (kq::piece_type(T)) {
        const uint8_t* blk = rows[r] + (b / (kq::block_elems(T) / dev::kQK)) * kq::block_bytes(T);
        prefetch_l2(blk);
        prefetch_l2(blk + kq::block_bytes(T) - 1);
      } else {
        load_raw<T>(rows[r], b, s.raw[u][r]);
      }
    }
}

// Lane `lane`'s partial dot products of nr (<= R) weight rows (rows[r], nb blocks each) with nt (<= NT) staged
// activation rows at act[r] + j * act_words: matmul.cu's row_dot for the quantized types, operation for operation
// (the lane's blocks in increasing order). A step loads the words of U of the lane's blocks of every row before
// any is used, so a lane keeps U * R blocks' loads in flight; the caller has loaded the first step (b0 = lane)
// into s already, before staging the activations, so that those loads overlap the staging and its barrier.
// kSameAct: every row takes act[0], whose words are then read once per block, not once per row.
template <GgmlType T, int R, int U, int NT, bool kSameAct>
__device__ __forceinline__ void rows_dots(RowsStep<T, R, U>& s, const uint8_t* const (&rows)[R],
                                          const int* const (&act)[R], int nr, int nb, int act_words, int nt,
                                          int lane, float (&acc)[R][NT]) {
  for (int b0 = lane; b0 < nb; b0 += 32 * U) {
    if (b0 != lane) load_step<T, R, U>(s, rows, nr, nb, b0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + 32 * u;
      if (b >= nb) break;
      int same[kSameAct ? NT : 1][kActWords];
      if constexpr (kSameAct) {
#pragma unroll
        for (int j = 0; j < NT; ++j)
          if (j < nt)
#pragma unroll
            for (int k = 0; k < kActWords; ++k) same[j][k] = act[0][j * act_words + b * kActWords + k];
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= nr) break;
        if constexpr (kq::piece_type(T)) {
          // matmul.cu's row_dot for these types: each piece's dot added in order, with the same roundings.
          const kq::Piece wp = kq::piece<T>(rows[r], b);
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            if (j < nt) {
              const int* ab;
              if constexpr (kSameAct) ab = same[j];
              else ab = act[r] + j * act_words + b * kActWords;
              int a8[8];
#pragma unroll
              for (int k = 0; k < 8; ++k) a8[k] = ab[k];
              acc[r][j] = kq::piece_dot<T>(wp, a8, __int_as_float(ab[8]), acc[r][j]);
            }
          }
          continue;
        }
        int wq[8];
        const float dw = unpack_raw<T>(s.raw[u][r], b, wq);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if (j < nt) {
            const int* ab = act[r] + j * act_words + b * kActWords;
            const float da = __int_as_float(kSameAct ? same[j][8] : ab[8]);
            int p = 0;
#pragma unroll
            for (int k = 0; k < 8; ++k) p = __dp4a(wq[k], kSameAct ? same[j][k] : ab[k], p);
            acc[r][j] = fmaf(dw * da, float(p), acc[r][j]);
          }
        }
      }
    }
  }
}

// ---- decode_matvec

struct MvPart {
  const uint8_t* w;
  int64_t rows;
  uint64_t row_bytes;
  float* y;
  const float* residual;
  int64_t first_tile;  // tiles of kMvRows rows before this part's
};
struct MvParams {
  MvPart part[3];
  int n_parts;
  int64_t cols;
  const uint8_t* x_q8;
  const float* x;
  const float* norm;  // x's RMSNorm weight (rms_norm_row in each block), or null
  float eps;
  dev::Gate gate;     // x's gated activation
  int nt;
  int64_t n_tiles;  // of all parts
};

// grid: at most the blocks the GPU holds at once; block b takes tiles b, b + gridDim.x, ... of kMvRows rows (the
// parts' tiles in part order), warp w row w of each, so that the activations are staged once per block and a wide
// matrix (the output head: 19,000 tiles) is not a stream of short blocks that each stage them again. Shared memory:
// the activations, nt * act_bytes(cols).
// One token: 4 blocks per SM (64 registers, which Q8_0's rows do not fit without spilling), so that twice the rows'
// loads are in flight.
template <GgmlType T, int NT>
__global__ void __launch_bounds__(kMvWarps * 32, NT == 1 && T != GgmlType::Q8_0 ? 4 : 2)
    decode_matvec_kernel(const __grid_constant__ MvParams p) {
  dev::allow_next();
  extern __shared__ __align__(16) int s_act[];
  const int nb = int(p.cols / dev::kQK);
  const int act_words = nb * kActWords;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int* acts[1] = {s_act};
  // Rows of up to 4 x 32 blocks (4,096 columns) in one step: all of a lane's weight loads go out at once (the first
  // tile's before the previous kernel has finished: launch_early), and the row waits for memory once.
  constexpr int kU = 4;
  RowsStep<T, 1, kU> st;
  const MvPart* m = nullptr;
  int64_t r = 0;
  bool live = false;
  const uint8_t* rows[1] = {nullptr};
  // The warp's row of a tile: its part, its index there, and whether the part has it.
  auto locate = [&](int64_t tile, const MvPart*& mp, int64_t& rr) {
    const int pi = p.n_parts > 2 && tile >= p.part[2].first_tile ? 2 : p.n_parts > 1 && tile >= p.part[1].first_tile;
    mp = &p.part[pi];
    rr = (tile - mp->first_tile) * kMvRows + warp;
    return rr < mp->rows;  // the whole warp
  };
  auto start = [&](int64_t tile) {
    live = locate(tile, m, r);
    rows[0] = m->w + (live ? r : 0) * m->row_bytes;
    if (live) load_step<T, 1, kU>(st, rows, 1, nb, lane);
  };
  start(blockIdx.x);
  dev::wait_prior();
  if (p.norm != nullptr) {
    for (int j = 0; j < p.nt; ++j) {
      int* dst = s_act + j * act_words;
      dev::rms_norm_row<kMvWarps * 32>(p.x + j * p.cols, p.norm, p.cols, p.eps, [&](float v, int64_t i) {
        quantize_block_act(v, dst + (i / dev::kQK) * kActWords, lane);
      });
      __syncthreads();  // the norm's shared sums serve the next token
    }
  } else if (p.x_q8 != nullptr) {
    stage_act(s_act, p.x_q8, int64_t(p.nt) * nb);
  } else {
    quantize_act(s_act, p.x, int64_t(p.nt) * nb, nb, p.gate);
  }
  __syncthreads();  // the last barrier: the warps go through the tiles on their own
  for (int64_t tile = blockIdx.x;;) {
    if constexpr (kq::piece_type(T)) {
      // The next tile's lines into L2 while this one is multiplied (the pieces are read where they are used).
      const MvPart* nm;
      int64_t nr;
      if (tile + gridDim.x < p.n_tiles && locate(tile + gridDim.x, nm, nr)) {
        const uint8_t* next[1] = {nm->w + nr * nm->row_bytes};
        load_step<T, 1, kU>(st, next, 1, nb, lane);
      }
    }
    if (live) {
      float acc[1][NT] = {};
      rows_dots<T, 1, kU, NT, true>(st, rows, acts, 1, nb, act_words, p.nt, lane, acc);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float s = dev::warp_sum(acc[0][j]);
        if (lane == 0 && j < p.nt) {
          const int64_t idx = j * m->rows + r;
          m->y[idx] = m->residual != nullptr ? __fadd_rn(m->residual[idx], s) : s;
        }
      }
    }
    tile += gridDim.x;
    if (tile >= p.n_tiles) break;
    start(tile);
  }
}

uint64_t matvec_smem(const model::Mat& w, int64_t n_tok) { return uint64_t(n_tok) * act_bytes(w.cols); }

template <GgmlType T, int NT>
void launch_matvec(const MvParams& p, uint64_t smem, cudaStream_t stream) {
  auto* kernel = decode_matvec_kernel<T, NT>;
  allow_smem(kernel, smem);
  int per_sm = 0;
  DF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kMvWarps * 32, smem));
  const int64_t blocks = std::min<int64_t>(p.n_tiles, int64_t(std::max(per_sm, 1)) * sm_count());
  launch_early(kernel, dim3(unsigned(blocks)), dim3(kMvWarps * 32), smem, stream, p);
}

// ---- rms_norm_q8

// A block per row: rms_norm_row, each block of 32 normed values quantized from registers by the warp that holds it.
__global__ void __launch_bounds__(kNormThreads) rms_norm_q8_kernel(const float* __restrict__ x,
                                                                   const float* __restrict__ weight,
                                                                   float* __restrict__ y, uint8_t* __restrict__ yq,
                                                                   int64_t cols, float eps) {
  dev::allow_next();
  dev::wait_prior();
  float* yr = y != nullptr ? y + int64_t(blockIdx.x) * cols : nullptr;
  uint8_t* yqr = yq + int64_t(blockIdx.x) * (cols / dev::kQK) * dev::kQ8Bytes;
  const int lane = threadIdx.x % 32;
  dev::rms_norm_row<kNormThreads>(x + int64_t(blockIdx.x) * cols, weight, cols, eps, [&](float v, int64_t i) {
    if (yr != nullptr) yr[i] = v;
    dev::quantize_block_q8_0(v, yqr + (i / dev::kQK) * dev::kQ8Bytes, lane);
  });
}

// ---- qk_norm_rope_store

// grid: (n_head + n_head_kv + 1, min(n_tok, 65535)); block h < n_head is a query head, then the key heads, then
// the values; block row y takes tokens y, y + gridDim.y, ...
__global__ void __launch_bounds__(kNormThreads)
    qk_norm_rope_store_kernel(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ v,
                              const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps,
                              int n_head, int n_head_kv, int hk, int hv, int n_rot, int64_t n_tok,
                              const int32_t* __restrict__ pos, const float* __restrict__ table, int64_t n_pos,
                              bool neox, uint16_t* __restrict__ kc, uint16_t* __restrict__ vc, int64_t n_ctx,
                              bool v_norm) {
  dev::allow_next();
  dev::wait_prior();
  __shared__ float s[kMaxHeadDim];
  const int h = blockIdx.x;
  const int64_t dim_k = int64_t(n_head_kv) * hk, dim_v = int64_t(n_head_kv) * hv;
  const bool is_q = h < n_head, is_v = h == n_head + n_head_kv;
  const float* nw = is_q ? q_norm : k_norm;
  const int half = n_rot / 2;
  for (int64_t t = blockIdx.y; t < n_tok; t += gridDim.y) {
    const int32_t p = pos[t];
    if (p < 0 || p >= n_pos || p >= n_ctx) __trap();  // position outside the table or the cache: a bug of the caller
    if (is_v) {  // store_kv's rounding, each head normed first where asked
      const float* vr = v + t * dim_v;
      uint16_t* vo = vc + int64_t(p) * dim_v;
      if (!v_norm) {
        for (int64_t i = threadIdx.x; i < dim_v; i += kNormThreads) vo[i] = dev::f32_to_f16(vr[i]);
        continue;
      }
      for (int hh = 0; hh < n_head_kv; ++hh) {
        const float scale = dev::block_rms_scale<kNormThreads>(vr + int64_t(hh) * hv, hv, eps);
        for (int i = threadIdx.x; i < hv; i += kNormThreads)
          vo[int64_t(hh) * hv + i] = dev::f32_to_f16(__fmul_rn(vr[int64_t(hh) * hv + i], scale));
        __syncthreads();  // the norm's shared sums are reused by the next head
      }
      continue;
    }
    float* xr = is_q ? q + (t * n_head + h) * hk : k + t * dim_k + int64_t(h - n_head) * hk;
    // This thread's rotation (half <= kMaxHeadDim / 2 <= kNormThreads: one pair at most), loaded before the norm's
    // barrier so that the table's round trip overlaps it.
    const bool rot = int(threadIdx.x) < half;
    float c = 0.0f, sn = 0.0f;
    if (rot) {
      c = table[(int64_t(p) * half + threadIdx.x) * 2];
      sn = table[(int64_t(p) * half + threadIdx.x) * 2 + 1];
    }
    if (nw != nullptr) {  // rms_norm in place, per head
      const float scale = dev::block_rms_scale<kNormThreads>(xr, hk, eps);
      for (int i = threadIdx.x; i < hk; i += kNormThreads) s[i] = __fmul_rn(__fmul_rn(xr[i], scale), nw[i]);
    } else {
      for (int i = threadIdx.x; i < hk; i += kNormThreads) s[i] = xr[i];
    }
    __syncthreads();
    if (rot) {
      const int i = threadIdx.x;
      const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
      const float x0 = s[ia], x1 = s[ib];
      // As rope.cu: the first product of each expression fused with the sum, as cpu::rope rounds.
      s[ia] = __fmaf_rn(x0, c, -__fmul_rn(x1, sn));
      s[ib] = __fmaf_rn(x0, sn, __fmul_rn(x1, c));
    }
    __syncthreads();
    for (int i = threadIdx.x; i < hk; i += kNormThreads) {
      xr[i] = s[i];
      if (!is_q) kc[int64_t(p) * dim_k + int64_t(h - n_head) * hk + i] = dev::f32_to_f16(s[i]);
    }
    __syncthreads();  // s and the norm's shared sums are reused by the next token
  }
}

// ---- moe_decode_gate_up

// grid: (n_ff / 32, n_tok * n_used); warp w takes gate and up rows r0 + 2w and r0 + 2w + 1. Shared memory: token t's
// activations (act_bytes(cols)), then the 2 x 32 dot products.
template <GgmlType T>
__global__ void __launch_bounds__(kGuWarps * 32, T == GgmlType::Q8_0 ? 1 : 2)  // 2 per SM: a layer in one wave
    moe_gate_up_kernel(const uint8_t* __restrict__ gw, uint64_t g_stride, const uint8_t* __restrict__ uw,
                       uint64_t u_stride, uint64_t row_bytes, int64_t cols, int64_t n_ff, int32_t n_expert,
                       const int32_t* __restrict__ ids, int n_used, const uint8_t* __restrict__ x_q8,
                       float* __restrict__ act, uint8_t* __restrict__ act_q8, bool gelu_act) {
  dev::allow_next();
  dev::wait_prior();  // the ids are the router's
  extern __shared__ __align__(16) int s_act[];
  const int64_t v = blockIdx.y, t = v / n_used;
  const int32_t e = ids[v];
  if (e < 0 || e >= n_expert) __trap();  // the router wrote a bad id: a bug, surfaced as a launch failure
  const int64_t r0 = int64_t(blockIdx.x) * kGuRows;
  const int nb = int(cols / dev::kQK);
  float* s_dot = reinterpret_cast<float*>(s_act + nb * kActWords);  // [2][32]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint8_t* g = gw + uint64_t(e) * g_stride + uint64_t(r0 + warp * kGuRowsPerWarp) * row_bytes;
  const uint8_t* u = uw + uint64_t(e) * u_stride + uint64_t(r0 + warp * kGuRowsPerWarp) * row_bytes;
  constexpr int kR = 2 * kGuRowsPerWarp, kU = 1;
  const uint8_t* rows[kR];
  const int* acts[kR];
#pragma unroll
  for (int i = 0; i < kGuRowsPerWarp; ++i) {
    rows[i] = g + i * row_bytes;
    rows[kGuRowsPerWarp + i] = u + i * row_bytes;
    acts[i] = acts[kGuRowsPerWarp + i] = s_act;
  }
  RowsStep<T, kR, kU> st;
  load_step<T, kR, kU>(st, rows, kR, nb, lane);
  stage_act(s_act, x_q8 + t * q8_bytes(cols), nb);
  __syncthreads();
  float acc[kR][1] = {};
  rows_dots<T, kR, kU, 1, true>(st, rows, acts, kR, nb, 0, 1, lane, acc);
#pragma unroll
  for (int i = 0; i < 2 * kGuRowsPerWarp; ++i) {
    const float s = dev::warp_sum(acc[i][0]);
    const int rr = warp * kGuRowsPerWarp + i % kGuRowsPerWarp;
    if (lane == 0) s_dot[(i < kGuRowsPerWarp ? 0 : kGuRows) + rr] = s;
  }
  __syncthreads();
  if (warp == 0) {
    const float gv = s_dot[lane], uv = s_dot[kGuRows + lane];
    const float a = dev::glu(gv, uv, gelu_act);  // glu_kernel's roundings
    if (act != nullptr) act[v * n_ff + r0 + lane] = a;
    dev::quantize_block_q8_0(a, act_q8 + v * q8_bytes(n_ff) + blockIdx.x * dev::kQ8Bytes, lane);
  }
}

uint64_t gate_up_smem(const model::Mat& gate) { return act_bytes(gate.cols) + 2 * kGuRows * sizeof(float); }

// ---- moe_decode_down

// grid: (ceil(n_embd / kDnRows), n_tok); warp w takes output row r0 + w of every selected expert, kDnChunk experts'
// rows per step. Shared memory: the token's n_used staged activation rows.
template <GgmlType T>
__global__ void __launch_bounds__(kDnWarps * 32)
    moe_down_kernel(const uint8_t* __restrict__ dw, uint64_t stride, uint64_t row_bytes, int64_t rows, int64_t cols,
                    int32_t n_expert, const int32_t* __restrict__ ids, const float* __restrict__ wts, int n_used,
                    const uint8_t* __restrict__ act_q8, const float* x, float* out) {
  dev::allow_next();
  dev::wait_prior();
  extern __shared__ __align__(16) int s_act[];
  const int64_t t = blockIdx.y;
  const int nb = int(cols / dev::kQK);
  const int act_words = nb * kActWords;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // Every warp holds the token's expert ids, lane l ids l and l + 32, and takes them by shuffle.
  const int32_t* tok_ids = ids + t * n_used;
  const int32_t id_lo = lane < n_used ? tok_ids[lane] : 0, id_hi = lane + 32 < n_used ? tok_ids[lane + 32] : 0;
  if (id_lo < 0 || id_lo >= n_expert || id_hi < 0 || id_hi >= n_expert) __trap();  // a router bug
  const int64_t r = int64_t(blockIdx.x) * kDnRows + warp;
  const bool live = r < rows;  // the whole warp
  const uint8_t* rp[kDnChunk];
  const int* ap[kDnChunk];
  int nr = 0;
  // Chunk k0's row pointers (slots past n_used repeat the last one and are never read).
  auto point = [&](int k0) {
    nr = min(kDnChunk, n_used - k0);
#pragma unroll
    for (int i = 0; i < kDnChunk; ++i) {
      const int k = k0 + min(i, nr - 1);
      const int32_t e = __shfl_sync(0xffffffffu, k < 32 ? id_lo : id_hi, k % 32);
      rp[i] = dw + uint64_t(e) * stride + uint64_t(live ? r : 0) * row_bytes;
      ap[i] = s_act + k * act_words;
    }
  };
  point(0);
  RowsStep<T, kDnChunk, 1> st;
  if (live) load_step<T, kDnChunk, 1>(st, rp, nr, nb, lane);
  stage_act(s_act, act_q8 + t * n_used * q8_bytes(cols), int64_t(n_used) * nb);
  __syncthreads();
  if (!live) return;  // no barrier follows
  // moe_combine's order and roundings: the first slot's product, then each next one added.
  float sum = 0.0f;
  for (int k0 = 0; k0 < n_used; k0 += kDnChunk) {
    if (k0 > 0) {
      point(k0);
      load_step<T, kDnChunk, 1>(st, rp, nr, nb, lane);
    }
    float acc[kDnChunk][1] = {};
    rows_dots<T, kDnChunk, 1, 1, false>(st, rp, ap, nr, nb, 0, 1, lane, acc);
#pragma unroll
    for (int i = 0; i < kDnChunk; ++i) {
      if (i >= nr) break;
      const float e = __fmul_rn(dev::warp_sum(acc[i][0]), wts[t * n_used + k0 + i]);
      sum = k0 + i == 0 ? e : __fadd_rn(sum, e);
    }
  }
  if (lane == 0) {
    const int64_t idx = t * rows + r;
    out[idx] = x != nullptr ? __fadd_rn(x[idx], sum) : sum;  // add_kernel's rounding
  }
}

uint64_t down_smem(const model::Mat& down, int32_t n_used) { return uint64_t(n_used) * act_bytes(down.cols); }

}  // namespace

bool decode_matvec_supported(const model::Mat& w, int64_t n_tok) {
  return n_tok >= 1 && n_tok <= kDecodeMaxTok && rows_stageable(w) && matvec_smem(w, n_tok) <= smem_limit();
}

void decode_matvec(const DecodeMatvecArgs& a) {
  DF_CHECK(a.n_parts >= 1 && a.n_parts <= 3);
  DF_CHECK(a.x_q8 != nullptr || a.x != nullptr);
  DF_CHECK(a.norm == nullptr || (a.x != nullptr && a.x_q8 == nullptr));
  DF_CHECK(!a.gate.on || (a.x != nullptr && a.x_q8 == nullptr && a.norm == nullptr));
  const model::Mat& w0 = a.parts[0].w;
  MvParams p{};
  p.n_parts = a.n_parts;
  p.cols = w0.cols;
  p.x_q8 = a.x_q8;  // null where norm is set (checked above)
  p.x = a.x;
  p.norm = a.norm;
  p.eps = a.eps;
  p.gate = device_gate(a.gate);
  p.nt = int(a.n_tok);
  int64_t tiles = 0;
  uint64_t smem = 0;
  for (int i = 0; i < a.n_parts; ++i) {
    const DecodeMatvecPart& pt = a.parts[i];
    DF_CHECK(decode_matvec_supported(pt.w, a.n_tok));
    DF_CHECK(pt.w.type == w0.type && pt.w.cols == w0.cols && pt.y != nullptr);
    DF_CHECK(static_cast<const void*>(pt.y) != static_cast<const void*>(a.x));
    p.part[i] = {pt.w.data, pt.w.rows, pt.w.row_bytes, pt.y, pt.residual, tiles};
    tiles += (pt.w.rows + kMvRows - 1) / kMvRows;
    smem = std::max(smem, matvec_smem(pt.w, a.n_tok));
  }
  p.n_tiles = tiles;
  const bool one = a.n_tok == 1;
  by_type(w0.type, [&](auto tc) {
    constexpr GgmlType T = decltype(tc)::value;
    one ? launch_matvec<T, 1>(p, smem, a.stream) : launch_matvec<T, kDecodeMaxTok>(p, smem, a.stream);
  });
}

void rms_norm_q8(const RmsNormQ8Args& a) {
  DF_CHECK(a.x != nullptr && a.weight != nullptr && a.y_q8 != nullptr);
  DF_CHECK(static_cast<const void*>(a.x) != static_cast<const void*>(a.y));
  DF_CHECK(a.n_rows >= 0 && a.n_rows <= 0x7fffffff && a.cols > 0 && a.cols % dev::kQK == 0);
  if (a.n_rows == 0) return;
  launch_early(rms_norm_q8_kernel, dim3(unsigned(a.n_rows)), dim3(kNormThreads), 0, a.stream, a.x, a.weight, a.y,
               a.y_q8, a.cols, a.eps);
}

void qk_norm_rope_store(const QkNormRopeStoreArgs& a) {
  DF_CHECK(a.q != nullptr && a.pos != nullptr && a.table != nullptr);
  DF_CHECK(a.k == nullptr || (a.v != nullptr && a.k_cache != nullptr && a.v_cache != nullptr));
  DF_CHECK(a.n_head > 0 && a.n_head_kv > 0 && a.head_dim_k > 0 && a.head_dim_v > 0);
  DF_CHECK(a.head_dim_k <= kMaxHeadDim && a.head_dim_v <= kMaxHeadDim);
  DF_CHECK(a.n_rot > 0 && a.n_rot % 2 == 0 && a.n_rot <= a.head_dim_k && a.n_pos > 0 && a.n_ctx > 0);
  DF_CHECK(a.n_tok >= 0);
  if (a.n_tok == 0) return;
  // Queries only: the key and value blocks are not launched.
  const unsigned blocks = unsigned(a.k ? a.n_head + a.n_head_kv + 1 : a.n_head);
  const dim3 grid{blocks, unsigned(std::min<int64_t>(a.n_tok, 65535))};
  launch_early(qk_norm_rope_store_kernel, grid, dim3(kNormThreads), 0, a.stream, a.q, a.k, a.v, a.q_norm, a.k_norm,
               a.eps, a.n_head, a.n_head_kv, a.head_dim_k, a.head_dim_v, a.n_rot, a.n_tok, a.pos, a.table, a.n_pos,
               a.style == model::RopeStyle::kNeox, a.k_cache, a.v_cache, a.n_ctx, a.v_norm);
}

bool moe_decode_gate_up_supported(const model::Mat& gate, const model::Mat& up, int64_t n_tok, int32_t n_used) {
  if (n_tok < 1 || n_tok > kDecodeMaxTok || n_used < 1 || n_used > kMaxUsed) return false;
  if (!rows_stageable(gate) || !rows_stageable(up)) return false;
  if (gate.type != up.type || gate.cols != up.cols || gate.rows != up.rows || gate.row_bytes != up.row_bytes)
    return false;
  return gate.rows % kGuRows == 0 && gate_up_smem(gate) <= smem_limit();
}

bool moe_decode_down_supported(const model::Mat& down, int64_t n_tok, int32_t n_used) {
  if (n_tok < 1 || n_tok > kDecodeMaxTok || n_used < 1 || n_used > kMaxUsed) return false;
  return rows_stageable(down) && down.cols % dev::kQK == 0 && down_smem(down, n_used) <= smem_limit();
}

bool moe_decode_supported(const model::Mat& gate, const model::Mat& up, const model::Mat& down, int64_t n_tok, int32_t n_used) {
  return moe_decode_gate_up_supported(gate, up, n_tok, n_used) && moe_decode_down_supported(down, n_tok, n_used) &&
         down.cols == gate.rows && down.rows == gate.cols;
}

void moe_decode_gate_up(const MoeDecodeGateUpArgs& a) {
  DF_CHECK(a.ids != nullptr && a.x_q8 != nullptr && a.act_q8 != nullptr);
  DF_CHECK(a.n_tok >= 1 && a.n_tok <= kDecodeMaxTok && a.n_used >= 1 && a.n_expert >= a.n_used);
  DF_CHECK(rows_stageable(a.gate) && rows_stageable(a.up));
  DF_CHECK(a.gate.type == a.up.type && a.gate.cols == a.up.cols && a.gate.rows == a.up.rows &&
           a.gate.row_bytes == a.up.row_bytes && a.gate.rows % kGuRows == 0);
  DF_CHECK(stride_ok(a.gate.type, a.gate_stride) && stride_ok(a.up.type, a.up_stride));
  DF_CHECK(a.gate_stride >= uint64_t(a.gate.rows) * a.gate.row_bytes);
  DF_CHECK(a.up_stride >= uint64_t(a.up.rows) * a.up.row_bytes);
  const uint64_t smem = gate_up_smem(a.gate);
  DF_CHECK(smem <= smem_limit());
  const dim3 grid{unsigned(a.gate.rows / kGuRows), unsigned(a.n_tok * a.n_used)};
  const int threads = kGuWarps * 32;
  by_type(a.gate.type, [&](auto tc) {
    constexpr GgmlType T = decltype(tc)::value;
    allow_smem(moe_gate_up_kernel<T>, smem);
    launch_early(moe_gate_up_kernel<T>, grid, dim3(threads), smem, a.stream, a.gate.data, a.gate_stride, a.up.data,
                 a.up_stride, a.gate.row_bytes, a.gate.cols, a.gate.rows, a.n_expert, a.ids, a.n_used, a.x_q8, a.act,
                 a.act_q8, a.glu == Glu::kGelu);
  });
}

void moe_decode_down(const MoeDecodeDownArgs& a) {
  DF_CHECK(a.ids != nullptr && a.weights != nullptr && a.act_q8 != nullptr && a.out != nullptr);
  DF_CHECK(a.n_tok >= 1 && a.n_tok <= kDecodeMaxTok && a.n_used >= 1 && a.n_used <= kMaxUsed &&
           a.n_expert >= a.n_used);
  DF_CHECK(rows_stageable(a.down) && stride_ok(a.down.type, a.down_stride));
  DF_CHECK(a.down_stride >= uint64_t(a.down.rows) * a.down.row_bytes);
  const uint64_t smem = down_smem(a.down, a.n_used);
  DF_CHECK(smem <= smem_limit());
  const int64_t gx = (a.down.rows + kDnRows - 1) / kDnRows;
  DF_CHECK(gx <= 0x7fffffff);
  const dim3 grid{unsigned(gx), unsigned(a.n_tok)};
  const int threads = kDnWarps * 32;
  by_type(a.down.type, [&](auto tc) {
    constexpr GgmlType T = decltype(tc)::value;
    allow_smem(moe_down_kernel<T>, smem);
    launch_early(moe_down_kernel<T>, grid, dim3(threads), smem, a.stream, a.down.data, a.down_stride,
                 a.down.row_bytes, a.down.rows, a.down.cols, a.n_expert, a.ids, a.weights, a.n_used, a.act_q8, a.x,
                 a.out);
  });
}

}  // namespace df::cuda
