// Matrix products with weights as the file stores them: a warp per weight row, a tile of up to kTile input vectors
// per block column (the weight row is read once per tile), lane partial sums reduced over the warp.
//   - Q4_0 / Q8_0: activations pre-quantized to Q8_0 (quantize.cu), integer dot products per 32-block (dp4a, exact),
//     scaled by d_w * d_a and accumulated in f32: only the float accumulation order differs from the CPU's.
//   - the K-quants, IQ4 and Q4_1 / Q5_0 / Q5_1 (kquant.cuh): the same Q8_0 activations, each 32-element piece of a
//     weight row decoded to codes, per-half scales and offsets; integer dot products (and code sums for the offsets)
//     per half, scaled in f32. The CPU quantizes these products' activations to Q8_K super-blocks instead, so they
//     agree within the activations' rounding, not bit for bit.
//   - F16 / BF16: activations rounded to f16 / bf16 as the CPU converts them, f32 fused multiply-adds.
//   - F32: f32 fused multiply-adds.
// Float weights for a few vectors take a block per row (float_matvec_kernel); F32 batches go to cuBLAS (blas.cpp),
// and so do dense prefill batches of the K-quant, IQ4 and offset types, through dequantized f16 tiles
// (dequant_products). The routed-expert variant picks a weight matrix per input vector from ids read on the device.
// The other quantized prefill batches, and the routed experts' tiles of more than 8 slots, go to the tensor-core
// kernels of mmq.cu instead.
#include <algorithm>

#include "backend/cuda/blas.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kquant.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mmq.cuh"
#include "backend/cuda/rms.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

using gguf::GgmlType;

namespace {

constexpr int kTile = 8;    // input vectors per block column
constexpr int kWarps = 4;   // weight rows per block
constexpr int kFvThreads = 256;  // float_matvec_kernel: threads per weight row
constexpr int kFvPre = 8;        // float_matvec_kernel: a thread's weights loaded before the previous kernel ends

// Lane `lane`'s partial dot products of one weight row with nt (<= NT) activation rows at act + j * act_stride.
// act is Q8_0 blocks for the quantized types, f32 otherwise.
template <GgmlType T, int NT>
__device__ __forceinline__ void row_dot(const uint8_t* __restrict__ w, int64_t cols, const uint8_t* __restrict__ act,
                                        uint64_t act_stride, int nt, int lane, float (&acc)[NT]) {
  if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q8_0) {
    const int64_t nb = cols / dev::kQK;
    for (int64_t b = lane; b < nb; b += 32) {
      int wq[8];  // 32 signed weights as 8 packed int32 (elements 4k .. 4k+3 in wq[k])
      float dw;
      if constexpr (T == GgmlType::Q4_0) {
        const uint8_t* wb = w + b * dev::kQ4Bytes;
        dw = dev::f16_to_f32(*reinterpret_cast<const uint16_t*>(wb));
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const uint32_t q = uint32_t(dev::load_i32_a2(wb + 2 + 4 * k));
          wq[k] = int(__vsubss4(q & 0x0f0f0f0fu, 0x08080808u));             // elements 4k .. 4k+3
          wq[k + 4] = int(__vsubss4((q >> 4) & 0x0f0f0f0fu, 0x08080808u));  // elements 16 + 4k ..
        }
      } else {
        const uint8_t* wb = w + b * dev::kQ8Bytes;
        dw = dev::f16_to_f32(*reinterpret_cast<const uint16_t*>(wb));
#pragma unroll
        for (int k = 0; k < 8; ++k) wq[k] = dev::load_i32_a2(wb + 2 + 4 * k);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if (j < nt) {
          const uint8_t* ab = act + j * act_stride + b * dev::kQ8Bytes;
          const float da = dev::f16_to_f32(*reinterpret_cast<const uint16_t*>(ab));
          int p = 0;
#pragma unroll
          for (int k = 0; k < 8; ++k) p = __dp4a(wq[k], dev::load_i32_a2(ab + 2 + 4 * k), p);
          acc[j] = fmaf(dw * da, float(p), acc[j]);
        }
      }
    }
  } else if constexpr (kq::piece_type(T)) {
    const int64_t np = cols / dev::kQK;
    for (int64_t p = lane; p < np; p += 32) {
      const kq::Piece wp = kq::piece<T>(w, p);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if (j < nt) {
          const uint8_t* ab = act + j * act_stride + p * dev::kQ8Bytes;
          int a[8];
#pragma unroll
          for (int k = 0; k < 8; ++k) a[k] = dev::load_i32_a2(ab + 2 + 4 * k);
          acc[j] = kq::piece_dot<T>(wp, a, dev::f16_to_f32(*reinterpret_cast<const uint16_t*>(ab)), acc[j]);
        }
      }
    }
  } else {
    for (int64_t i = lane; i < cols; i += 32) {
      float wv;
      if constexpr (T == GgmlType::F16) {
        wv = dev::f16_to_f32(reinterpret_cast<const uint16_t*>(w)[i]);
      } else if constexpr (T == GgmlType::BF16) {
        wv = dev::bf16_to_f32(reinterpret_cast<const uint16_t*>(w)[i]);
      } else {
        wv = reinterpret_cast<const float*>(w)[i];
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if (j < nt) {
          float x = reinterpret_cast<const float*>(act + j * act_stride)[i];
          if constexpr (T == GgmlType::F16) x = dev::round_f16(x);
          if constexpr (T == GgmlType::BF16) x = dev::round_bf16(x);
          acc[j] = fmaf(wv, x, acc[j]);
        }
      }
    }
  }
}

// grid: (ceil(rows / kWarps), ceil(n_tok / kTile)); act rows are act_stride bytes apart.
template <GgmlType T>
__global__ void __launch_bounds__(kWarps * 32) matmul_kernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols,
                                                             uint64_t row_bytes, const uint8_t* __restrict__ act,
                                                             uint64_t act_stride, int64_t n_tok, float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= rows) return;
  const int64_t t0 = int64_t(blockIdx.y) * kTile;
  const int nt = int(min(int64_t(kTile), n_tok - t0));
  float acc[kTile] = {};
  row_dot<T, kTile>(w + r * row_bytes, cols, act + t0 * act_stride, act_stride, nt, lane, acc);
#pragma unroll
  for (int j = 0; j < kTile; ++j) {
    const float s = dev::warp_sum(acc[j]);
    if (lane == 0 && j < nt) y[(t0 + j) * rows + r] = s;
  }
}

// Float weights for a few vectors: a block of kFvThreads per weight row, so that a short, wide matrix (the F32
// router: 128 rows of 2048) spreads over the whole GPU instead of 32 blocks of warps. Thread i sums columns i,
// i + kFvThreads, ... with fused multiply-adds (the activations rounded as row_dot rounds them), then the block
// reduces: warp butterflies, then the warps' sums in warp order. Only the f32 summation order differs from the CPU.
// grid: rows; y[t][r] for t < nt (<= NT).
// Normed (n.norm set): x is the residual stream; each block norms its nt rows into shared memory first
// (rms_norm_row, rms_norm_q8's arithmetic) and block 0 also writes them, and their Q8_0 blocks where n.xq is set, as
// rms_norm_q8 would have, for the products that follow.
struct FvNorm {
  const float* norm;  // [cols], or null
  float eps;
  float* xn;     // [nt][cols]
  uint8_t* xq;   // [nt][cols / 32] Q8_0 blocks, or null
};

template <GgmlType T, int NT>
__global__ void __launch_bounds__(kFvThreads) float_matvec_kernel(const uint8_t* __restrict__ w, int64_t rows,
                                                                  int64_t cols, uint64_t row_bytes,
                                                                  const float* __restrict__ x, int nt,
                                                                  float* __restrict__ y, const FvNorm n) {
  dev::allow_next();
  const int64_t r = blockIdx.x;
  const uint8_t* wr = w + uint64_t(r) * row_bytes;
  auto weight = [&](int64_t i) {
    if constexpr (T == GgmlType::F16) return dev::f16_to_f32(reinterpret_cast<const uint16_t*>(wr)[i]);
    else if constexpr (T == GgmlType::BF16) return dev::bf16_to_f32(reinterpret_cast<const uint16_t*>(wr)[i]);
    else return reinterpret_cast<const float*>(wr)[i];
  };
  // A row of up to kFvPre * kFvThreads columns (the router's 2,048) is loaded before the previous kernel has
  // finished (weights are written by no kernel), so the row's memory latency overlaps it and the norm.
  const bool pre = cols <= int64_t(kFvPre) * kFvThreads;
  float wpre[kFvPre];
  if (pre) {
#pragma unroll
    for (int k = 0; k < kFvPre; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * kFvThreads;
      wpre[k] = i < cols ? weight(i) : 0.0f;
    }
  }
  dev::wait_prior();
  extern __shared__ float s_x[];  // normed: [nt][cols]
  if (n.norm != nullptr) {
    const int lane = threadIdx.x % 32;
    for (int j = 0; j < nt; ++j) {
      dev::rms_norm_row<kFvThreads>(x + j * cols, n.norm, cols, n.eps, [&](float v, int64_t i) {
        s_x[j * cols + i] = v;
        if (blockIdx.x != 0) return;  // block-uniform
        n.xn[j * cols + i] = v;
        if (n.xq != nullptr) dev::quantize_block_q8_0(v, n.xq + (j * (cols / dev::kQK) + i / dev::kQK) * dev::kQ8Bytes, lane);
      });
      __syncthreads();  // s_x complete; the norm's shared sums serve the next row
    }
    x = s_x;
  }
  __shared__ float part[NT][kFvThreads / 32];
  float acc[NT] = {};
  auto add = [&](int64_t i, float wv) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      if (j < nt) {
        float xv = x[j * cols + i];
        if constexpr (T == GgmlType::F16) xv = dev::round_f16(xv);
        if constexpr (T == GgmlType::BF16) xv = dev::round_bf16(xv);
        acc[j] = fmaf(wv, xv, acc[j]);
      }
    }
  };
  if (pre) {
#pragma unroll
    for (int k = 0; k < kFvPre; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * kFvThreads;
      if (i < cols) add(i, wpre[k]);
    }
  } else {
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < cols; i += kFvThreads) add(i, weight(i));
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float s = dev::warp_sum(acc[j]);
    if (lane == 0) part[j][warp] = s;
  }
  __syncthreads();
  if (int(threadIdx.x) < nt) {
    float s = part[threadIdx.x][0];
#pragma unroll
    for (int k = 1; k < kFvThreads / 32; ++k) s += part[threadIdx.x][k];
    y[int64_t(threadIdx.x) * rows + r] = s;
  }
}

template <GgmlType T>
void launch_float_matvec(const MatmulArgs& a, const FvNorm& n = {}) {
  const int nt = int(a.n_tok);
  const unsigned grid = unsigned(a.w.rows);
  auto* kernel = nt == 1 ? float_matvec_kernel<T, 1> : float_matvec_kernel<T, kDecodeMaxTok>;
  const size_t smem = n.norm != nullptr ? size_t(nt) * size_t(a.w.cols) * sizeof(float) : 0;
  launch_early(kernel, dim3(grid), dim3(kFvThreads), smem, a.stream, static_cast<const uint8_t*>(a.w.data), a.w.rows,
               a.w.cols, a.w.row_bytes, static_cast<const float*>(a.x), nt, a.y, n);
}

bool float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// grid: (ceil(rows / kWarps), n_tok * n_used); block column v multiplies expert ids[v] with act row v / act_div.
template <GgmlType T>
__global__ void __launch_bounds__(kWarps * 32)
    moe_matmul_kernel(const uint8_t* __restrict__ w, uint64_t expert_stride, int32_t n_expert,
                      const int32_t* __restrict__ ids, int64_t rows, int64_t cols, uint64_t row_bytes,
                      const uint8_t* __restrict__ act, uint64_t act_stride, int act_div, float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= rows) return;
  const int64_t v = blockIdx.y;
  const int32_t e = ids[v];
  if (e < 0 || e >= n_expert) __trap();  // the router wrote a bad id: a bug, surfaced as a launch failure
  float acc[1] = {};
  row_dot<T, 1>(w + uint64_t(e) * expert_stride + r * row_bytes, cols, act + (v / act_div) * act_stride, act_stride,
                1, lane, acc);
  const float s = dev::warp_sum(acc[0]);
  if (lane == 0) y[v * rows + r] = s;
}

// grid: (ceil(rows / kWarps), max tiles); block column ty multiplies tile ty of moe_plan's tiles (blocks past the
// actual count leave). act holds the gathered inputs in plan order. NT: the plan's tile size, kTile.
template <GgmlType T, int NT>
__global__ void __launch_bounds__(kWarps * 32)
    moe_grouped_kernel(const uint8_t* __restrict__ w, uint64_t expert_stride, int32_t n_expert,
                       const int32_t* __restrict__ order, const int32_t* __restrict__ tiles, int64_t rows, int64_t cols,
                       uint64_t row_bytes, const uint8_t* __restrict__ act, uint64_t act_stride, float* __restrict__ y) {
  const int ty = blockIdx.y;
  if (ty >= tiles[0]) return;
  const int32_t e = tiles[1 + 3 * ty], first = tiles[2 + 3 * ty], cnt = tiles[3 + 3 * ty];
  if (e < 0 || e >= n_expert || cnt < 1 || cnt > NT) __trap();  // a corrupt plan: a bug
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= rows) return;
  float acc[NT] = {};
  row_dot<T, NT>(w + uint64_t(e) * expert_stride + r * row_bytes, cols, act + int64_t(first) * act_stride,
                 act_stride, cnt, lane, acc);
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float s = dev::warp_sum(acc[j]);
    if (lane == 0 && j < cnt) y[int64_t(order[first + j]) * rows + r] = s;
  }
}

// ---- Prefill of the K-quant, IQ4 and offset types: dequantized f16 tiles and cuBLAS.
//
// Dense products of these types take this path rather than mmq.cu's int8 tiles (which the routed experts use: an
// expert's few slots would not pay for dequantizing its matrix): each row of weights is decoded once per product,
// the product runs at cuBLAS's f16 tensor-core speed, and f16 weights and activations are closer to the dequantized
// model than Q8_0 activations are. Without a dequantization workspace, dense batches take mmq.cu too.

// x [n] f32 -> f16 (round to nearest even), saturated at f16's largest finite value: an activation past 65504
// (an outlier of a few layers' inputs) keeps its sign and bounds the product instead of making it infinite.
__global__ void to_f16_kernel(const float* __restrict__ x, uint16_t* __restrict__ y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  y[i] = dev::f32_to_f16(isnan(v) ? v : fminf(fmaxf(v, -65504.0f), 65504.0f));  // a NaN stays one
}

// Rows [0, nr) of w (row_bytes apart) to out [nr][cols] f16: cpu::dequantize_row's values rounded to f16. Four
// threads per 32-element piece, each decoding the piece and storing a quarter of it (8 values) as one 16-byte word,
// so that a warp's stores are 512 contiguous bytes (the decoding's loads of a piece hit the same cache lines).
template <GgmlType T>
__global__ void dequant_f16_kernel(const uint8_t* __restrict__ w, uint64_t row_bytes, int64_t cols, int64_t nr,
                                   uint4* __restrict__ out) {
  const int64_t np = cols / dev::kQK;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= nr * np * 4) return;
  const int q = int(idx % 4);
  const int64_t pi = idx / 4, r = pi / np, p = pi % np;
  const kq::Piece wp = kq::piece<T>(w + uint64_t(r) * row_bytes, p);
  uint32_t h[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    h[i] = uint32_t(dev::f32_to_f16(kq::piece_value(wp, 8 * q + 2 * i))) |
           (uint32_t(dev::f32_to_f16(kq::piece_value(wp, 8 * q + 2 * i + 1))) << 16);
  out[(r * cols + p * dev::kQK) / 8 + q] = make_uint4(h[0], h[1], h[2], h[3]);
}

template <GgmlType T>
void launch_dequant_f16(const model::Mat& w, int64_t r0, int64_t nr, uint16_t* tile, cudaStream_t stream) {
  const int64_t n = nr * (w.cols / dev::kQK) * 4;
  DF_CHECK(reinterpret_cast<uintptr_t>(tile) % 16 == 0);
  dequant_f16_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(w.data + uint64_t(r0) * w.row_bytes, w.row_bytes,
                                                              w.cols, nr, reinterpret_cast<uint4*>(tile));
}

void dequant_products(const MatmulArgs& a) {
  const int64_t rows = a.w.rows, cols = a.w.cols;
  uint16_t* xh = reinterpret_cast<uint16_t*>(a.dequant);
  uint16_t* tile = xh + a.n_tok * cols;  // cols % 32 == 0: 64-byte aligned after the activations
  const int64_t n = a.n_tok * cols;
  to_f16_kernel<<<unsigned((n + 255) / 256), 256, 0, a.stream>>>(a.x, xh, n);
  DF_CUDA_CHECK_LAUNCH();
  // Tiles share one buffer: each tile's dequantization waits, in stream order, for the product that read the last.
  for (int64_t r0 = 0; r0 < rows; r0 += kDequantTileRows) {
    const int64_t nr = std::min(kDequantTileRows, rows - r0);
    switch (a.w.type) {
#define DF_DEQUANT_CASE(T) \
  case T: launch_dequant_f16<T>(a.w, r0, nr, tile, a.stream); break;
      DF_DEQUANT_CASE(GgmlType::Q4_1)
      DF_DEQUANT_CASE(GgmlType::Q5_0)
      DF_DEQUANT_CASE(GgmlType::Q5_1)
      DF_DEQUANT_CASE(GgmlType::IQ4_NL)
      DF_DEQUANT_CASE(GgmlType::Q2_K)
      DF_DEQUANT_CASE(GgmlType::Q3_K)
      DF_DEQUANT_CASE(GgmlType::Q4_K)
      DF_DEQUANT_CASE(GgmlType::Q5_K)
      DF_DEQUANT_CASE(GgmlType::Q6_K)
      DF_DEQUANT_CASE(GgmlType::IQ4_XS)
#undef DF_DEQUANT_CASE
      default: DF_CHECK(false);
    }
    DF_CUDA_CHECK_LAUNCH();
    const bool queued = blas::hgemm_rows({.w = tile, .rows = nr, .cols = cols, .ld_w = cols, .x = xh,
                                          .n_tok = a.n_tok, .y = a.y + r0, .ld_y = rows, .stream = a.stream});
    DF_CHECK(queued);  // the caller asked blas::available, and the shapes are within cuBLAS's
  }
}

// xg[i] = x[src(order[i])]: input rows in plan order (src = the slot, or its token when the input is per token).
__global__ void gather_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ order, int64_t n_rows,
                                   int64_t cols, int div, float* __restrict__ xg) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * cols) return;
  const int64_t i = idx / cols, c = idx % cols;
  xg[idx] = x[int64_t(order[i] / div) * cols + c];
}

// The types whose products take Q8_0 activations, all of them with tensor-core kernels (mmq.cu).
bool quantized(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q8_0 || kq::piece_type(t); }
bool mma_type(GgmlType t) { return quantized(t); }

void check_mat(const model::Mat& w) {
  DF_CHECK(w.data != nullptr && matmul_type_supported(w.type));
  DF_CHECK(w.rows > 0 && w.cols > 0);
  uint64_t min_row = uint64_t(w.cols) * (w.type == GgmlType::F32 ? 4 : 2);
  if (mma_type(w.type)) min_row = uint64_t(w.cols / 32) * (w.type == GgmlType::Q4_0 ? 18 : 34);
  if (kq::piece_type(w.type)) {
    DF_CHECK(w.cols % kq::block_elems(w.type) == 0);
    min_row = uint64_t(w.cols / kq::block_elems(w.type)) * kq::block_bytes(w.type);
  }
  if (quantized(w.type)) DF_CHECK(w.cols % 32 == 0);
  DF_CHECK(w.row_bytes >= min_row);
  // The kernels read 2-byte words of the rows: they must start at even addresses.
  DF_CHECK(reinterpret_cast<uintptr_t>(w.data) % 2 == 0 && w.row_bytes % 2 == 0);
  if (w.type == GgmlType::F32) DF_CHECK(reinterpret_cast<uintptr_t>(w.data) % 4 == 0 && w.row_bytes % 4 == 0);
}

// Converts the activations the kernel reads: Q8_0 into scratch for quantized weights, the f32 input otherwise.
// Returns the activation base and the bytes between rows.
std::pair<const uint8_t*, uint64_t> prepare_act(GgmlType t, const float* x, int64_t cols, int64_t n_vec,
                                               uint8_t* scratch, cudaStream_t stream) {
  if (quantized(t)) {
    DF_CHECK(scratch != nullptr);
    QuantizeQ8Args q;
    q.x = x;
    q.y = scratch;
    q.n_rows = n_vec;
    q.cols = cols;
    q.stream = stream;
    quantize_q8_0(q);
    return {scratch, uint64_t(cols / 32) * dev::kQ8Bytes};
  }
  return {reinterpret_cast<const uint8_t*>(x), uint64_t(cols) * 4};
}

}  // namespace

bool matmul_type_supported(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 ||
         t == GgmlType::Q4_0 || kq::piece_type(t);
}

bool normed_router_supported(const model::Mat& w, int64_t n_tok) {
  return float_type(w.type) && w.data != nullptr && n_tok >= 1 && n_tok <= kDecodeMaxTok && w.cols % dev::kQK == 0 &&
         w.rows <= 0x7fffffff && uint64_t(n_tok) * uint64_t(w.cols) * sizeof(float) <= 48 * 1024;
}

void normed_router(const NormedRouterArgs& a) {
  DF_CHECK(normed_router_supported(a.w, a.n_tok));
  DF_CHECK(a.x != nullptr && a.norm != nullptr && a.y != nullptr && a.xn != nullptr);
  DF_CHECK(static_cast<const void*>(a.xn) != static_cast<const void*>(a.x));
  const MatmulArgs m{.w = a.w, .x = a.x, .n_tok = a.n_tok, .y = a.y, .stream = a.stream};
  const FvNorm n{.norm = a.norm, .eps = a.eps, .xn = a.xn, .xq = a.xq};
  switch (a.w.type) {
    case GgmlType::F16: launch_float_matvec<GgmlType::F16>(m, n); break;
    case GgmlType::BF16: launch_float_matvec<GgmlType::BF16>(m, n); break;
    default: launch_float_matvec<GgmlType::F32>(m, n); break;
  }
}

void matmul(const MatmulArgs& a) {
  check_mat(a.w);
  DF_CHECK(a.x != nullptr && a.y != nullptr && a.n_tok > 0);
  DF_CHECK(static_cast<const void*>(a.x) != static_cast<const void*>(a.y));
  // A few vectors of quantized weights: the decode kernel (decode.cu), the same results with its rows staged in
  // shared memory.
  if (decode_matvec_supported(a.w, a.n_tok)) {
    // Quantized once here rather than in each of the kernel's blocks (the output head has thousands).
    const uint8_t* xq =
        a.x_q8 != nullptr ? a.x_q8 : prepare_act(a.w.type, a.x, a.w.cols, a.n_tok, a.scratch, a.stream).first;
    DecodeMatvecArgs d{.n_parts = 1, .x = a.x, .x_q8 = xq, .n_tok = a.n_tok, .stream = a.stream};
    d.parts[0] = {.w = a.w, .y = a.y};
    decode_matvec(d);
    return;
  }
  if (!quantized(a.w.type) && a.n_tok <= kDecodeMaxTok) {
    DF_CHECK(a.w.rows <= 0x7fffffff);
    switch (a.w.type) {
      case GgmlType::F16: launch_float_matvec<GgmlType::F16>(a); break;
      case GgmlType::BF16: launch_float_matvec<GgmlType::BF16>(a); break;
      case GgmlType::F32: launch_float_matvec<GgmlType::F32>(a); break;
      default: DF_CHECK(false);
    }
    DF_CUDA_CHECK_LAUNCH();
    return;
  }
  // F32 batches: cuBLAS (f32 products and sums; only the summation order differs from the CPU). It declines
  // inside a graph capture that would have to create its handle.
  if (a.w.type == GgmlType::F32 && a.use_mma && a.n_tok >= kMmaMinTokens &&
      blas::sgemm_rows({.w = reinterpret_cast<const float*>(a.w.data), .rows = a.w.rows, .cols = a.w.cols,
                        .ld_w = int64_t(a.w.row_bytes / 4), .x = a.x, .n_tok = a.n_tok, .y = a.y,
                        .stream = a.stream}))
    return;
  if (kq::piece_type(a.w.type) && a.use_mma && a.n_tok >= kMmaMinTokens && a.dequant != nullptr &&
      a.w.rows <= 0x7fffffff && a.n_tok <= 0x7fffffff && blas::available(a.stream)) {
    dequant_products(a);
    return;
  }
  const int64_t gx = (a.w.rows + kWarps - 1) / kWarps, gy = (a.n_tok + kTile - 1) / kTile;
  DF_CHECK(gx <= 0x7fffffff && gy <= 65535);
  auto [act, stride] = quantized(a.w.type) && a.x_q8 != nullptr
                           ? std::pair<const uint8_t*, uint64_t>{a.x_q8, uint64_t(a.w.cols / 32) * dev::kQ8Bytes}
                           : prepare_act(a.w.type, a.x, a.w.cols, a.n_tok, a.scratch, a.stream);
  if (mma_type(a.w.type) && a.use_mma && a.n_tok >= kMmaMinTokens) {
    mmq::dense(a.w, act, stride, a.n_tok, a.y, a.stream);
    return;
  }
  const dim3 grid{unsigned(gx), unsigned(gy)};
  const int threads = kWarps * 32;
  switch (a.w.type) {
#define DF_MATMUL_CASE(T)                                                                                     \
  case T:                                                                                                     \
    matmul_kernel<T><<<grid, threads, 0, a.stream>>>(a.w.data, a.w.rows, a.w.cols, a.w.row_bytes, act, stride, \
                                                     a.n_tok, a.y);                                           \
    break;
    DF_MATMUL_CASE(GgmlType::Q4_0)
    DF_MATMUL_CASE(GgmlType::Q8_0)
    DF_MATMUL_CASE(GgmlType::Q4_1)
    DF_MATMUL_CASE(GgmlType::Q5_0)
    DF_MATMUL_CASE(GgmlType::Q5_1)
    DF_MATMUL_CASE(GgmlType::IQ4_NL)
    DF_MATMUL_CASE(GgmlType::Q2_K)
    DF_MATMUL_CASE(GgmlType::Q3_K)
    DF_MATMUL_CASE(GgmlType::Q4_K)
    DF_MATMUL_CASE(GgmlType::Q5_K)
    DF_MATMUL_CASE(GgmlType::Q6_K)
    DF_MATMUL_CASE(GgmlType::IQ4_XS)
    DF_MATMUL_CASE(GgmlType::F16)
    DF_MATMUL_CASE(GgmlType::BF16)
    DF_MATMUL_CASE(GgmlType::F32)
#undef DF_MATMUL_CASE
    default: DF_CHECK(false);
  }
  DF_CUDA_CHECK_LAUNCH();
}

void moe_matmul(const MoeMatmulArgs& a) {
  check_mat(a.w);
  DF_CHECK(a.ids != nullptr && a.x != nullptr && a.y != nullptr);
  DF_CHECK(a.n_tok > 0 && a.n_used > 0 && a.n_expert >= a.n_used);
  DF_CHECK(a.expert_stride >= uint64_t(a.w.rows) * a.w.row_bytes);
  const int64_t n_slots = a.n_tok * a.n_used;
  const int64_t gx = (a.w.rows + kWarps - 1) / kWarps;
  DF_CHECK(gx <= 0x7fffffff && n_slots <= 65535);
  const int64_t n_in = a.x_per_slot ? n_slots : a.n_tok;
  auto [act, stride] = prepare_act(a.w.type, a.x, a.w.cols, n_in, a.scratch, a.stream);
  const int act_div = a.x_per_slot ? 1 : a.n_used;
  const dim3 grid{unsigned(gx), unsigned(n_slots)};
  const int threads = kWarps * 32;
  switch (a.w.type) {
#define DF_MOE_CASE(T)                                                                                          \
  case T:                                                                                                       \
    moe_matmul_kernel<T><<<grid, threads, 0, a.stream>>>(a.w.data, a.expert_stride, a.n_expert, a.ids, a.w.rows, \
                                                         a.w.cols, a.w.row_bytes, act, stride, act_div, a.y);   \
    break;
    DF_MOE_CASE(GgmlType::Q4_0)
    DF_MOE_CASE(GgmlType::Q8_0)
    DF_MOE_CASE(GgmlType::Q4_1)
    DF_MOE_CASE(GgmlType::Q5_0)
    DF_MOE_CASE(GgmlType::Q5_1)
    DF_MOE_CASE(GgmlType::IQ4_NL)
    DF_MOE_CASE(GgmlType::Q2_K)
    DF_MOE_CASE(GgmlType::Q3_K)
    DF_MOE_CASE(GgmlType::Q4_K)
    DF_MOE_CASE(GgmlType::Q5_K)
    DF_MOE_CASE(GgmlType::Q6_K)
    DF_MOE_CASE(GgmlType::IQ4_XS)
    DF_MOE_CASE(GgmlType::F16)
    DF_MOE_CASE(GgmlType::BF16)
    DF_MOE_CASE(GgmlType::F32)
#undef DF_MOE_CASE
    default: DF_CHECK(false);
  }
  DF_CUDA_CHECK_LAUNCH();
}

namespace {

template <GgmlType T>
void launch_grouped(const MoeGroupedMatmulArgs& a, dim3 grid, const uint8_t* act, uint64_t stride) {
  moe_grouped_kernel<T, kTile><<<grid, kWarps * 32, 0, a.stream>>>(a.w.data, a.expert_stride, a.n_expert, a.order,
                                                                   a.tiles, a.w.rows, a.w.cols, a.w.row_bytes, act,
                                                                   stride, a.y);
}

}  // namespace

void moe_matmul_grouped(const MoeGroupedMatmulArgs& a) {
  check_mat(a.w);
  DF_CHECK(a.order != nullptr && a.tiles != nullptr && a.y != nullptr);
  DF_CHECK(a.n_slots > 0 && a.n_used > 0 && a.n_expert >= a.n_used && a.n_slots % a.n_used == 0);
  DF_CHECK(a.expert_stride >= uint64_t(a.w.rows) * a.w.row_bytes);
  const int64_t max_tiles = moe_max_tiles(a.n_slots, a.n_expert, a.tile_slots);
  if (a.tile_slots > kTile && mma_type(a.w.type)) {
    // Tensor cores: the inputs quantized once in their own order (per token or per slot) and read by index.
    const int64_t n_in = a.x_per_slot ? a.n_slots : a.n_slots / a.n_used;
    DF_CHECK(a.x_q8 != nullptr || a.x != nullptr);
    auto [act, stride] = a.x_q8 != nullptr
                             ? std::pair<const uint8_t*, uint64_t>{a.x_q8, uint64_t(a.w.cols / 32) * dev::kQ8Bytes}
                             : prepare_act(a.w.type, a.x, a.w.cols, n_in, a.scratch, a.stream);
    mmq::grouped({.w = a.w, .expert_stride = a.expert_stride, .n_expert = a.n_expert, .order = a.order,
                  .tiles = a.tiles, .max_tiles = max_tiles, .tile_slots = a.tile_slots, .n_slots = a.n_slots,
                  .act = act, .act_stride = stride, .act_div = a.x_per_slot ? 1 : a.n_used, .y = a.y,
                  .stream = a.stream});
    return;
  }
  // The warp-per-row kernel: tiles of kTile.
  DF_CHECK(a.tile_slots <= kTile);
  DF_CHECK(a.x != nullptr && a.gathered != nullptr);
  DF_CHECK(static_cast<const void*>(a.gathered) != static_cast<const void*>(a.x));
  const int64_t gx = (a.w.rows + kWarps - 1) / kWarps;
  DF_CHECK(gx <= 0x7fffffff && max_tiles <= 65535);
  const int64_t n_el = a.n_slots * a.w.cols;
  const int64_t ggrid = (n_el + 255) / 256;
  DF_CHECK(ggrid <= 0x7fffffff);
  gather_rows_kernel<<<unsigned(ggrid), 256, 0, a.stream>>>(a.x, a.order, a.n_slots, a.w.cols,
                                                            a.x_per_slot ? 1 : a.n_used, a.gathered);
  DF_CUDA_CHECK_LAUNCH();
  auto [act, stride] = prepare_act(a.w.type, a.gathered, a.w.cols, a.n_slots, a.scratch, a.stream);
  const dim3 grid{unsigned(gx), unsigned(max_tiles)};
  switch (a.w.type) {
#define DF_GROUPED_CASE(T) \
  case T: launch_grouped<T>(a, grid, act, stride); break;
    DF_GROUPED_CASE(GgmlType::Q4_0)
    DF_GROUPED_CASE(GgmlType::Q8_0)
    DF_GROUPED_CASE(GgmlType::Q4_1)
    DF_GROUPED_CASE(GgmlType::Q5_0)
    DF_GROUPED_CASE(GgmlType::Q5_1)
    DF_GROUPED_CASE(GgmlType::IQ4_NL)
    DF_GROUPED_CASE(GgmlType::Q2_K)
    DF_GROUPED_CASE(GgmlType::Q3_K)
    DF_GROUPED_CASE(GgmlType::Q4_K)
    DF_GROUPED_CASE(GgmlType::Q5_K)
    DF_GROUPED_CASE(GgmlType::Q6_K)
    DF_GROUPED_CASE(GgmlType::IQ4_XS)
    DF_GROUPED_CASE(GgmlType::F16)
    DF_GROUPED_CASE(GgmlType::BF16)
    DF_GROUPED_CASE(GgmlType::F32)
#undef DF_GROUPED_CASE
    default: DF_CHECK(false);
  }
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
