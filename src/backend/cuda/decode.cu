// Decode kernels: the products and element-wise steps of a step of one (or a few) tokens, fused so that a layer
// takes a handful of launches, each reading its weights at close to the memory's speed.
//
// Weight rows are staged into shared memory with 16-byte asynchronous copies (every copy of a block in flight at
// once, many blocks per SM), and the Q8_0 activations sit in shared memory beside them. The dot products then run
// exactly as matmul.cu's row_dot: lane l accumulates blocks l, l + 32, ... in order with the same f32 operations, and
// the warp butterfly reduces the 32 partial sums. So each product equals matmul's bit for bit, and the fused
// epilogues (residual add, SwiGLU, Q8_0 quantization, routed-expert combine) repeat the unfused kernels' roundings.
#include <cuda_pipeline.h>

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/rms.cuh"
#include "diskformer/backend/cuda/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

using gguf::GgmlType;

namespace {

constexpr int kMvWarps = 4;                       // decode_matvec: 4 warps of 2 rows each
constexpr int kMvRowsPerWarp = 2;
constexpr int kMvRows = kMvWarps * kMvRowsPerWarp;
static_assert(kMvRows == kDecodeRowsPerBlock);
constexpr int kGuWarps = 8;                       // moe_decode_gate_up: 32 gate and 32 up rows (one Q8_0 block)
constexpr int kGuRows = 32;
constexpr int kDnWarps = 4;                       // moe_decode_down: 8 output rows of every selected expert
constexpr int kDnRowsPerWarp = 2;
constexpr int kDnRows = kDnWarps * kDnRowsPerWarp;
constexpr int kNormThreads = 256;                 // as rms_norm.cu, so the square sums run in the same order
constexpr int kMaxHeadDim = 512;

bool quantized(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q8_0; }
__host__ __device__ inline uint64_t q8_bytes(int64_t cols) { return uint64_t(cols / dev::kQK) * dev::kQ8Bytes; }
__host__ __device__ inline uint64_t round16(uint64_t n) { return (n + 15) / 16 * 16; }
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool rows_stageable(const DMat& w) {
  return w.data != nullptr && quantized(w.type) && w.cols > 0 && w.cols % dev::kQK == 0 && w.rows > 0 &&
         aligned16(w.data) && w.row_bytes % 16 == 0 &&
         w.row_bytes >= uint64_t(w.cols / dev::kQK) * (w.type == GgmlType::Q4_0 ? dev::kQ4Bytes : dev::kQ8Bytes);
}

// The most dynamic shared memory one block of the current device may take.
uint64_t smem_limit() {
  int dev = 0, v = 0;
  DF_CUDA_CHECK(cudaGetDevice(&dev));
  DF_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return uint64_t(v);
}

// Kernels past the default 48 KiB of dynamic shared memory must say so (allowed during graph capture: no stream op).
template <typename Kernel>
void allow_smem(Kernel kernel, uint64_t bytes) {
  if (bytes > 48 * 1024)
    DF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// Starts the asynchronous copy of n bytes (a multiple of 16; both ends 16-byte aligned) into shared memory, spread
// over the block's threads. The caller commits and waits.
__device__ __forceinline__ void stage_async(uint8_t* dst, const uint8_t* src, uint64_t n) {
  for (uint64_t i = uint64_t(threadIdx.x) * 16; i < n; i += uint64_t(blockDim.x) * 16)
    __pipeline_memcpy_async(dst + i, src + i, 16);
}

// n bytes (even) of Q8_0 blocks into shared memory, 2 bytes at a time (the blocks are only 2-byte aligned).
__device__ __forceinline__ void copy_q8(uint8_t* dst, const uint8_t* src, uint64_t n) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
  for (uint64_t i = threadIdx.x; i < n / 2; i += blockDim.x) d[i] = s[i];
}

// n_blocks Q8_0 blocks of x (f32, contiguous) into dst, a warp per block as quantize_q8_0.
__device__ __forceinline__ void quantize_to(uint8_t* dst, const float* x, int64_t n_blocks) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  for (int64_t b = warp; b < n_blocks; b += n_warps)
    dev::quantize_block_q8_0(x[b * dev::kQK + lane], dst + b * dev::kQ8Bytes, lane);
}

// Lane `lane`'s partial dot products of one weight row w (nb blocks) with nt (<= NT) Q8_0 activation rows at
// act + j * act_stride: matmul.cu's row_dot for the quantized types, operation for operation.
template <GgmlType T, int NT>
__device__ __forceinline__ void lane_dots(const uint8_t* w, int nb, const uint8_t* act, int act_stride, int nt,
                                          int lane, float (&acc)[NT]) {
  for (int b = lane; b < nb; b += 32) {
    int wq[8];  // 32 signed weights as 8 packed int32 (elements 4k .. 4k+3 in wq[k])
    float dw;
    if constexpr (T == GgmlType::Q4_0) {
      const uint8_t* wb = w + b * dev::kQ4Bytes;
      dw = dev::f16_to_f32(*reinterpret_cast<const uint16_t*>(wb));
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t q = uint32_t(dev::load_i32_a2(wb + 2 + 4 * k));
        wq[k] = int(__vsubss4(q & 0x0f0f0f0fu, 0x08080808u));
        wq[k + 4] = int(__vsubss4((q >> 4) & 0x0f0f0f0fu, 0x08080808u));
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
  int nt;
};

// grid: the parts' tiles of kMvRows rows, in part order. Shared memory: the activations (round16(nt * nb * 34)
// bytes), then the tile's weight rows.
template <GgmlType T, int NT>
__global__ void __launch_bounds__(kMvWarps * 32) decode_matvec_kernel(const __grid_constant__ MvParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int64_t tile = blockIdx.x;
  const int pi = p.n_parts > 2 && tile >= p.part[2].first_tile ? 2 : p.n_parts > 1 && tile >= p.part[1].first_tile;
  const MvPart& m = p.part[pi];
  const int64_t r0 = (tile - m.first_tile) * kMvRows;
  const int n_rows = int(min(int64_t(kMvRows), m.rows - r0));
  const int nb = int(p.cols / dev::kQK);
  const int act_stride = nb * dev::kQ8Bytes;
  uint8_t* s_act = smem;
  uint8_t* s_w = smem + round16(uint64_t(p.nt) * act_stride);
  stage_async(s_w, m.w + r0 * m.row_bytes, uint64_t(n_rows) * m.row_bytes);
  __pipeline_commit();
  // The activations while the weights are in flight.
  if (p.x_q8 != nullptr) copy_q8(s_act, p.x_q8, uint64_t(p.nt) * act_stride);
  else quantize_to(s_act, p.x, int64_t(p.nt) * nb);
  __pipeline_wait_prior(0);
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int i = 0; i < kMvRowsPerWarp; ++i) {
    const int rr = warp * kMvRowsPerWarp + i;
    if (rr >= n_rows) break;  // the same for the whole warp
    float acc[NT] = {};
    lane_dots<T, NT>(s_w + rr * m.row_bytes, nb, s_act, act_stride, p.nt, lane, acc);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float s = dev::warp_sum(acc[j]);
      if (lane == 0 && j < p.nt) {
        const int64_t idx = j * m.rows + r0 + rr;
        m.y[idx] = m.residual != nullptr ? __fadd_rn(m.residual[idx], s) : s;
      }
    }
  }
}

uint64_t matvec_smem(const DMat& w, int64_t n_tok) {
  return round16(uint64_t(n_tok) * q8_bytes(w.cols)) + uint64_t(kMvRows) * w.row_bytes;
}

template <GgmlType T, int NT>
void launch_matvec(const MvParams& p, int64_t tiles, uint64_t smem, cudaStream_t stream) {
  allow_smem(decode_matvec_kernel<T, NT>, smem);
  decode_matvec_kernel<T, NT><<<unsigned(tiles), kMvWarps * 32, smem, stream>>>(p);
}

// ---- rms_norm_q8

__global__ void __launch_bounds__(kNormThreads) rms_norm_q8_kernel(const float* __restrict__ x,
                                                                   const float* __restrict__ weight,
                                                                   float* __restrict__ y, uint8_t* __restrict__ yq,
                                                                   int64_t cols, float eps) {
  const float* xr = x + int64_t(blockIdx.x) * cols;
  const float scale = dev::block_rms_scale<kNormThreads>(xr, cols, eps);
  if (y != nullptr) {
    float* yr = y + int64_t(blockIdx.x) * cols;
    for (int64_t i = threadIdx.x; i < cols; i += kNormThreads) yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), weight[i]);
  }
  // Each warp recomputes the normed values of its blocks (the same products) instead of reading y back.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t nb = cols / dev::kQK;
  uint8_t* yqr = yq + int64_t(blockIdx.x) * nb * dev::kQ8Bytes;
  for (int64_t b = warp; b < nb; b += kNormThreads / 32) {
    const int64_t i = b * dev::kQK + lane;
    dev::quantize_block_q8_0(__fmul_rn(__fmul_rn(xr[i], scale), weight[i]), yqr + b * dev::kQ8Bytes, lane);
  }
}

// ---- qk_norm_rope_store

// grid: (n_head + n_head_kv + 1, min(n_tok, 65535)); block h < n_head is a query head, then the key heads, then
// the values; block row y takes tokens y, y + gridDim.y, ...
__global__ void __launch_bounds__(kNormThreads)
    qk_norm_rope_store_kernel(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ v,
                              const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps,
                              int n_head, int n_head_kv, int hk, int hv, int n_rot, int64_t n_tok,
                              const int32_t* __restrict__ pos, const float* __restrict__ table, int64_t n_pos,
                              bool neox, uint16_t* __restrict__ kc, uint16_t* __restrict__ vc, int64_t n_ctx) {
  __shared__ float s[kMaxHeadDim];
  const int h = blockIdx.x;
  const int64_t dim_k = int64_t(n_head_kv) * hk, dim_v = int64_t(n_head_kv) * hv;
  const bool is_q = h < n_head, is_v = h == n_head + n_head_kv;
  const float* nw = is_q ? q_norm : k_norm;
  const int half = n_rot / 2;
  for (int64_t t = blockIdx.y; t < n_tok; t += gridDim.y) {
    const int32_t p = pos[t];
    if (p < 0 || p >= n_pos || p >= n_ctx) __trap();  // position outside the table or the cache: a bug of the caller
    if (is_v) {  // store_kv's rounding
      const float* vr = v + t * dim_v;
      uint16_t* vo = vc + int64_t(p) * dim_v;
      for (int64_t i = threadIdx.x; i < dim_v; i += kNormThreads) vo[i] = dev::f32_to_f16(vr[i]);
      continue;
    }
    float* xr = is_q ? q + (t * n_head + h) * hk : k + t * dim_k + int64_t(h - n_head) * hk;
    if (nw != nullptr) {  // rms_norm in place, per head
      const float scale = dev::block_rms_scale<kNormThreads>(xr, hk, eps);
      for (int i = threadIdx.x; i < hk; i += kNormThreads) s[i] = __fmul_rn(__fmul_rn(xr[i], scale), nw[i]);
    } else {
      for (int i = threadIdx.x; i < hk; i += kNormThreads) s[i] = xr[i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < half; i += kNormThreads) {
      const float c = table[(int64_t(p) * half + i) * 2], sn = table[(int64_t(p) * half + i) * 2 + 1];
      const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
      const float x0 = s[ia], x1 = s[ib];
      // As rope.cu: separate roundings, no fused multiply-add.
      s[ia] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
      s[ib] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
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

// grid: (n_ff / 32, n_tok * n_used). Shared memory: token t's activations (round16), 32 gate rows, 32 up rows, then
// the 2 x 32 dot products.
template <GgmlType T>
__global__ void __launch_bounds__(kGuWarps * 32)
    moe_gate_up_kernel(const uint8_t* __restrict__ gw, uint64_t g_stride, const uint8_t* __restrict__ uw,
                       uint64_t u_stride, uint64_t row_bytes, int64_t cols, int64_t n_ff, int32_t n_expert,
                       const int32_t* __restrict__ ids, int n_used, const uint8_t* __restrict__ x_q8,
                       float* __restrict__ act, uint8_t* __restrict__ act_q8) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int64_t v = blockIdx.y, t = v / n_used;
  const int32_t e = ids[v];
  if (e < 0 || e >= n_expert) __trap();  // the router wrote a bad id: a bug, surfaced as a launch failure
  const int64_t r0 = int64_t(blockIdx.x) * kGuRows;
  const int nb = int(cols / dev::kQK);
  const uint64_t act_bytes = round16(q8_bytes(cols)), span = uint64_t(kGuRows) * row_bytes;
  uint8_t* s_act = smem;
  uint8_t* s_g = smem + act_bytes;
  uint8_t* s_u = s_g + span;
  float* s_dot = reinterpret_cast<float*>(s_u + span);  // [2][32]
  stage_async(s_g, gw + uint64_t(e) * g_stride + r0 * row_bytes, span);
  stage_async(s_u, uw + uint64_t(e) * u_stride + r0 * row_bytes, span);
  __pipeline_commit();
  copy_q8(s_act, x_q8 + t * q8_bytes(cols), q8_bytes(cols));
  __pipeline_wait_prior(0);
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // Warp w: rows 4w .. 4w+3 of gate (i < 4) and of up (i >= 4).
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int rr = warp * 4 + (i % 4);
    const uint8_t* rows = i < 4 ? s_g : s_u;
    float acc[1] = {};
    lane_dots<T, 1>(rows + rr * row_bytes, nb, s_act, 0, 1, lane, acc);
    const float s = dev::warp_sum(acc[0]);
    if (lane == 0) s_dot[(i < 4 ? 0 : kGuRows) + rr] = s;
  }
  __syncthreads();
  if (warp == 0) {
    const float g = s_dot[lane], u = s_dot[kGuRows + lane];
    const float a = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);  // swiglu_kernel's roundings
    if (act != nullptr) act[v * n_ff + r0 + lane] = a;
    dev::quantize_block_q8_0(a, act_q8 + v * q8_bytes(n_ff) + blockIdx.x * dev::kQ8Bytes, lane);
  }
}

uint64_t gate_up_smem(const DMat& gate) {
  return round16(q8_bytes(gate.cols)) + 2 * uint64_t(kGuRows) * gate.row_bytes + 2 * kGuRows * sizeof(float);
}

// ---- moe_decode_down

// grid: (ceil(n_embd / kDnRows), n_tok). Shared memory: the token's n_used Q8_0 activation rows (round16), then
// kDnRows rows of each selected expert.
template <GgmlType T>
__global__ void __launch_bounds__(kDnWarps * 32)
    moe_down_kernel(const uint8_t* __restrict__ dw, uint64_t stride, uint64_t row_bytes, int64_t rows, int64_t cols,
                    int32_t n_expert, const int32_t* __restrict__ ids, const float* __restrict__ wts, int n_used,
                    const uint8_t* __restrict__ act_q8, const float* x, float* out) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int64_t t = blockIdx.y;
  const int64_t r0 = int64_t(blockIdx.x) * kDnRows;
  const int n_rows = int(min(int64_t(kDnRows), rows - r0));
  const int nb = int(cols / dev::kQK);
  const int act_stride = nb * dev::kQ8Bytes;
  const uint64_t span = uint64_t(kDnRows) * row_bytes;
  uint8_t* s_act = smem;
  uint8_t* s_w = smem + round16(uint64_t(n_used) * act_stride);
  for (int k = 0; k < n_used; ++k) {
    const int32_t e = ids[t * n_used + k];
    if (e < 0 || e >= n_expert) __trap();  // the router wrote a bad id: a bug, surfaced as a launch failure
    stage_async(s_w + k * span, dw + uint64_t(e) * stride + r0 * row_bytes, uint64_t(n_rows) * row_bytes);
  }
  __pipeline_commit();
  copy_q8(s_act, act_q8 + t * n_used * act_stride, uint64_t(n_used) * act_stride);
  __pipeline_wait_prior(0);
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int i = 0; i < kDnRowsPerWarp; ++i) {
    const int rr = warp * kDnRowsPerWarp + i;
    if (rr >= n_rows) break;  // the same for the whole warp
    // moe_combine's order and roundings: the first slot's product, then each next one added.
    float sum = 0.0f;
    for (int k = 0; k < n_used; ++k) {
      float acc[1] = {};
      lane_dots<T, 1>(s_w + k * span + rr * row_bytes, nb, s_act + k * act_stride, 0, 1, lane, acc);
      const float e = __fmul_rn(dev::warp_sum(acc[0]), wts[t * n_used + k]);
      sum = k == 0 ? e : __fadd_rn(sum, e);
    }
    if (lane == 0) {
      const int64_t idx = t * rows + r0 + rr;
      out[idx] = x != nullptr ? __fadd_rn(x[idx], sum) : sum;  // add_kernel's rounding
    }
  }
}

uint64_t down_smem(const DMat& down, int32_t n_used) {
  return round16(uint64_t(n_used) * q8_bytes(down.cols)) + uint64_t(n_used) * kDnRows * down.row_bytes;
}

}  // namespace

bool decode_matvec_supported(const DMat& w, int64_t n_tok) {
  return n_tok >= 1 && n_tok <= kDecodeMaxTok && rows_stageable(w) && matvec_smem(w, n_tok) <= smem_limit();
}

void decode_matvec(const DecodeMatvecArgs& a) {
  DF_CHECK(a.n_parts >= 1 && a.n_parts <= 3);
  DF_CHECK(a.x_q8 != nullptr || a.x != nullptr);
  const DMat& w0 = a.parts[0].w;
  MvParams p{};
  p.n_parts = a.n_parts;
  p.cols = w0.cols;
  p.x_q8 = a.x_q8;
  p.x = a.x;
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
  DF_CHECK(tiles <= 0x7fffffff);
  const bool one = a.n_tok == 1;
  if (w0.type == GgmlType::Q4_0) {
    one ? launch_matvec<GgmlType::Q4_0, 1>(p, tiles, smem, a.stream)
        : launch_matvec<GgmlType::Q4_0, kDecodeMaxTok>(p, tiles, smem, a.stream);
  } else {
    one ? launch_matvec<GgmlType::Q8_0, 1>(p, tiles, smem, a.stream)
        : launch_matvec<GgmlType::Q8_0, kDecodeMaxTok>(p, tiles, smem, a.stream);
  }
  DF_CUDA_CHECK_LAUNCH();
}

void rms_norm_q8(const RmsNormQ8Args& a) {
  DF_CHECK(a.x != nullptr && a.weight != nullptr && a.y_q8 != nullptr);
  DF_CHECK(static_cast<const void*>(a.x) != static_cast<const void*>(a.y));
  DF_CHECK(a.n_rows >= 0 && a.n_rows <= 0x7fffffff && a.cols > 0 && a.cols % dev::kQK == 0);
  if (a.n_rows == 0) return;
  rms_norm_q8_kernel<<<unsigned(a.n_rows), kNormThreads, 0, a.stream>>>(a.x, a.weight, a.y, a.y_q8, a.cols, a.eps);
  DF_CUDA_CHECK_LAUNCH();
}

void qk_norm_rope_store(const QkNormRopeStoreArgs& a) {
  DF_CHECK(a.q != nullptr && a.k != nullptr && a.v != nullptr && a.pos != nullptr && a.table != nullptr);
  DF_CHECK(a.k_cache != nullptr && a.v_cache != nullptr);
  DF_CHECK(a.n_head > 0 && a.n_head_kv > 0 && a.head_dim_k > 0 && a.head_dim_v > 0);
  DF_CHECK(a.head_dim_k <= kMaxHeadDim && a.head_dim_v <= kMaxHeadDim);
  DF_CHECK(a.n_rot > 0 && a.n_rot % 2 == 0 && a.n_rot <= a.head_dim_k && a.n_pos > 0 && a.n_ctx > 0);
  DF_CHECK(a.n_tok >= 0);
  if (a.n_tok == 0) return;
  const dim3 grid{unsigned(a.n_head + a.n_head_kv + 1), unsigned(std::min<int64_t>(a.n_tok, 65535))};
  qk_norm_rope_store_kernel<<<grid, kNormThreads, 0, a.stream>>>(
      a.q, a.k, a.v, a.q_norm, a.k_norm, a.eps, a.n_head, a.n_head_kv, a.head_dim_k, a.head_dim_v, a.n_rot, a.n_tok,
      a.pos,
      a.table, a.n_pos, a.style == model::RopeStyle::kNeox, a.k_cache, a.v_cache, a.n_ctx);
  DF_CUDA_CHECK_LAUNCH();
}

bool moe_decode_supported(const DMat& gate, const DMat& up, const DMat& down, int64_t n_tok, int32_t n_used) {
  if (n_tok < 1 || n_tok > kDecodeMaxTok || n_used < 1) return false;
  if (!rows_stageable(gate) || !rows_stageable(up) || !rows_stageable(down)) return false;
  if (gate.type != up.type || gate.cols != up.cols || gate.rows != up.rows || gate.row_bytes != up.row_bytes)
    return false;
  if (gate.rows % kGuRows != 0 || down.cols != gate.rows || down.rows != gate.cols) return false;
  const uint64_t limit = smem_limit();
  return gate_up_smem(gate) <= limit && down_smem(down, n_used) <= limit;
}

void moe_decode_gate_up(const MoeDecodeGateUpArgs& a) {
  DF_CHECK(a.ids != nullptr && a.x_q8 != nullptr && a.act_q8 != nullptr);
  DF_CHECK(a.n_tok >= 1 && a.n_tok <= kDecodeMaxTok && a.n_used >= 1 && a.n_expert >= a.n_used);
  DF_CHECK(rows_stageable(a.gate) && rows_stageable(a.up));
  DF_CHECK(a.gate.type == a.up.type && a.gate.cols == a.up.cols && a.gate.rows == a.up.rows &&
           a.gate.row_bytes == a.up.row_bytes && a.gate.rows % kGuRows == 0);
  DF_CHECK(a.gate_stride % 16 == 0 && a.up_stride % 16 == 0);
  DF_CHECK(a.gate_stride >= uint64_t(a.gate.rows) * a.gate.row_bytes);
  DF_CHECK(a.up_stride >= uint64_t(a.up.rows) * a.up.row_bytes);
  const uint64_t smem = gate_up_smem(a.gate);
  DF_CHECK(smem <= smem_limit());
  const dim3 grid{unsigned(a.gate.rows / kGuRows), unsigned(a.n_tok * a.n_used)};
  const int threads = kGuWarps * 32;
  if (a.gate.type == GgmlType::Q4_0) {
    allow_smem(moe_gate_up_kernel<GgmlType::Q4_0>, smem);
    moe_gate_up_kernel<GgmlType::Q4_0><<<grid, threads, smem, a.stream>>>(
        a.gate.data, a.gate_stride, a.up.data, a.up_stride, a.gate.row_bytes, a.gate.cols, a.gate.rows, a.n_expert,
        a.ids, a.n_used, a.x_q8, a.act, a.act_q8);
  } else {
    allow_smem(moe_gate_up_kernel<GgmlType::Q8_0>, smem);
    moe_gate_up_kernel<GgmlType::Q8_0><<<grid, threads, smem, a.stream>>>(
        a.gate.data, a.gate_stride, a.up.data, a.up_stride, a.gate.row_bytes, a.gate.cols, a.gate.rows, a.n_expert,
        a.ids, a.n_used, a.x_q8, a.act, a.act_q8);
  }
  DF_CUDA_CHECK_LAUNCH();
}

void moe_decode_down(const MoeDecodeDownArgs& a) {
  DF_CHECK(a.ids != nullptr && a.weights != nullptr && a.act_q8 != nullptr && a.out != nullptr);
  DF_CHECK(a.n_tok >= 1 && a.n_tok <= kDecodeMaxTok && a.n_used >= 1 && a.n_expert >= a.n_used);
  DF_CHECK(rows_stageable(a.down) && a.down_stride % 16 == 0);
  DF_CHECK(a.down_stride >= uint64_t(a.down.rows) * a.down.row_bytes);
  const uint64_t smem = down_smem(a.down, a.n_used);
  DF_CHECK(smem <= smem_limit());
  const int64_t gx = (a.down.rows + kDnRows - 1) / kDnRows;
  DF_CHECK(gx <= 0x7fffffff);
  const dim3 grid{unsigned(gx), unsigned(a.n_tok)};
  const int threads = kDnWarps * 32;
  if (a.down.type == GgmlType::Q4_0) {
    allow_smem(moe_down_kernel<GgmlType::Q4_0>, smem);
    moe_down_kernel<GgmlType::Q4_0><<<grid, threads, smem, a.stream>>>(
        a.down.data, a.down_stride, a.down.row_bytes, a.down.rows, a.down.cols, a.n_expert, a.ids, a.weights,
        a.n_used, a.act_q8, a.x, a.out);
  } else {
    allow_smem(moe_down_kernel<GgmlType::Q8_0>, smem);
    moe_down_kernel<GgmlType::Q8_0><<<grid, threads, smem, a.stream>>>(
        a.down.data, a.down_stride, a.down.row_bytes, a.down.rows, a.down.cols, a.n_expert, a.ids, a.weights,
        a.n_used, a.act_q8, a.x, a.out);
  }
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
