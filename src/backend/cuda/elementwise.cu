// Element-wise steps of the forward pass: the gated activations (SwiGLU, GeGLU, GELU), scales and the logits' soft
// cap, the residual add, small copies in one launch, KV cache stores (f16) and embedding row gathers.
// Roundings are spelled out (__f*_rn) where the CPU code rounds each operation, so nvcc does not fuse them.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kquant.cuh"
#include "backend/cuda/launch.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

using gguf::GgmlType;

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) { return cuda::grid_for(n, kThreads); }

__global__ void glu_kernel(const float* gate, const float* up, float* y, int64_t n, bool gelu_act) {
  dev::allow_next();
  dev::wait_prior();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = dev::glu(gate[i], up[i], gelu_act);
}

__global__ void gelu_kernel(const float* x, const float* m, int64_t m_stride, float* y, int64_t n_rows, int64_t cols) {
  dev::allow_next();
  dev::wait_prior();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * cols) return;
  const float g = dev::gelu(x[i]);
  y[i] = m ? __fmul_rn(g, m[(i / cols) * m_stride + i % cols]) : g;
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  dev::allow_next();
  dev::wait_prior();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fmul_rn(x[i], s);
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  dev::allow_next();
  dev::wait_prior();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fmul_rn(tanhf(__fmul_rn(x[i], 1.0f / cap)), cap);
}


__global__ void add_kernel(float* x, const float* y, int64_t n) {
  dev::allow_next();
  dev::wait_prior();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fadd_rn(x[i], y[i]);
}

// blockIdx.y: the span; the blocks along x stride over its words.
__global__ void copy_spans_kernel(CopySpansArgs a) {
  dev::allow_next();
  dev::wait_prior();
  const CopySpan& c = a.spans[blockIdx.y];
  const int64_t words = c.bytes / 4;
  const uint32_t* src = static_cast<const uint32_t*>(c.src);
  uint32_t* dst = static_cast<uint32_t*>(c.dst);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// A thread per element of the larger of the key and value rows of one token.
__global__ void store_kv_kernel(const float* __restrict__ k, const float* __restrict__ v, uint16_t* __restrict__ kc,
                                uint16_t* __restrict__ vc, const int32_t* __restrict__ pos, int64_t n_tok,
                                int64_t dim_k, int64_t dim_v, int64_t n_ctx) {
  const int64_t width = max(dim_k, dim_v);
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_tok * width) return;
  const int64_t t = idx / width, i = idx % width;
  const int32_t p = pos[t];
  if (p < 0 || p >= n_ctx) __trap();  // position outside the cache: a bug of the caller
  if (i < dim_k) kc[int64_t(p) * dim_k + i] = dev::f32_to_f16(k[t * dim_k + i]);
  if (i < dim_v) vc[int64_t(p) * dim_v + i] = dev::f32_to_f16(v[t * dim_v + i]);
}

// A block per output row; each thread dequantizes whole 32-blocks (quantized types) or single elements.
template <GgmlType T>
__global__ void get_rows_kernel(const uint8_t* __restrict__ table, int64_t rows, int64_t cols, uint64_t row_bytes,
                                const int32_t* __restrict__ ids, const int32_t* __restrict__ slot_of, int64_t n_ids,
                                float* __restrict__ out) {
  int32_t id = ids[blockIdx.x];
  if (slot_of) {
    if (id < 0 || id >= n_ids) __trap();  // token ids are validated on the host before upload
    id = slot_of[id];                     // present: the row cache's prepare() ran first
  }
  if (id < 0 || id >= rows) __trap();
  const uint8_t* r = table + uint64_t(id) * row_bytes;
  float* o = out + int64_t(blockIdx.x) * cols;
  if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q8_0) {
    // A thread per element: element i of block b (nibble layout of cpu::BlockQ4_0).
    for (int64_t e = threadIdx.x; e < cols; e += blockDim.x) {
      const int64_t b = e / dev::kQK;
      const int i = int(e % dev::kQK);
      if constexpr (T == GgmlType::Q4_0) {
        const uint8_t* bb = r + b * dev::kQ4Bytes;
        const float d = dev::f16_to_f32(*reinterpret_cast<const uint16_t*>(bb));
        const int q = i < 16 ? (bb[2 + i] & 0x0f) - 8 : (bb[2 + i - 16] >> 4) - 8;
        o[e] = float(q) * d;
      } else {
        const uint8_t* bb = r + b * dev::kQ8Bytes;
        const float d = dev::f16_to_f32(*reinterpret_cast<const uint16_t*>(bb));
        o[e] = float(int8_t(bb[2 + i])) * d;
      }
    }
  } else if constexpr (kq::piece_type(T)) {
    // A thread per 32-element piece.
    for (int64_t p = threadIdx.x; p < cols / dev::kQK; p += blockDim.x) {
      const kq::Piece w = kq::piece<T>(r, p);
#pragma unroll
      for (int i = 0; i < dev::kQK; ++i) o[p * dev::kQK + i] = kq::piece_value(w, i);
    }
  } else {
    for (int64_t e = threadIdx.x; e < cols; e += blockDim.x) {
      if constexpr (T == GgmlType::F16) o[e] = dev::f16_to_f32(reinterpret_cast<const uint16_t*>(r)[e]);
      else if constexpr (T == GgmlType::BF16) o[e] = dev::bf16_to_f32(reinterpret_cast<const uint16_t*>(r)[e]);
      else o[e] = reinterpret_cast<const float*>(r)[e];
    }
  }
}

}  // namespace

void glu(const GluArgs& a) {
  DF_CHECK(a.gate != nullptr && a.up != nullptr && a.y != nullptr && a.n >= 0);
  if (a.n == 0) return;
  launch_early(glu_kernel, dim3(grid_for(a.n)), dim3(kThreads), 0, a.stream, a.gate, a.up, a.y, a.n,
               a.act == Glu::kGelu);
}

void gelu(const GeluArgs& a) {
  DF_CHECK(a.x != nullptr && a.y != nullptr && a.n_rows >= 0 && a.cols > 0);
  DF_CHECK(a.m == nullptr || a.m_stride >= a.cols);
  if (a.n_rows == 0) return;
  launch_early(gelu_kernel, dim3(grid_for(a.n_rows * a.cols)), dim3(kThreads), 0, a.stream, a.x, a.m, a.m_stride, a.y,
               a.n_rows, a.cols);
}

void scale(const ScaleArgs& a) {
  DF_CHECK(a.x != nullptr && a.n >= 0);
  if (a.n == 0) return;
  launch_early(scale_kernel, dim3(grid_for(a.n)), dim3(kThreads), 0, a.stream, a.x, a.n, a.s);
}

void softcap(const SoftcapArgs& a) {
  DF_CHECK(a.x != nullptr && a.n >= 0 && a.cap > 0.0f);
  if (a.n == 0) return;
  launch_early(softcap_kernel, dim3(grid_for(a.n)), dim3(kThreads), 0, a.stream, a.x, a.n, a.cap);
}

void add(const AddArgs& a) {
  DF_CHECK(a.x != nullptr && a.y != nullptr && a.n >= 0);
  if (a.n == 0) return;
  launch_early(add_kernel, dim3(grid_for(a.n)), dim3(kThreads), 0, a.stream, a.x, a.y, a.n);
}

void copy_spans(const CopySpansArgs& a) {
  int64_t most = 0;
  for (const CopySpan& c : a.spans) {
    DF_CHECK(c.bytes >= 0 && c.bytes % 4 == 0 && (c.bytes == 0 || (c.src != nullptr && c.dst != nullptr)));
    most = std::max(most, c.bytes / 4);
  }
  if (most == 0) return;
  // Small copies (a few kilobytes): a few blocks each, their threads' stores to host memory in flight together.
  const unsigned blocks = unsigned(std::min<int64_t>(grid_for(most, kThreads), 64));
  launch_early(copy_spans_kernel, dim3(blocks, 4), dim3(kThreads), 0, a.stream, a);
}

void store_kv(const StoreKvArgs& a) {
  DF_CHECK(a.k != nullptr && a.v != nullptr && a.k_cache != nullptr && a.v_cache != nullptr && a.pos != nullptr);
  DF_CHECK(a.n_tok >= 0 && a.dim_k > 0 && a.dim_v > 0 && a.n_ctx > 0);
  if (a.n_tok == 0) return;
  store_kv_kernel<<<grid_for(a.n_tok * std::max(a.dim_k, a.dim_v)), kThreads, 0, a.stream>>>(
      a.k, a.v, a.k_cache, a.v_cache, a.pos, a.n_tok, a.dim_k, a.dim_v, a.n_ctx);
  DF_CUDA_CHECK_LAUNCH();
}

void get_rows(const GetRowsArgs& a) {
  const model::Mat& w = a.table;
  DF_CHECK(w.data != nullptr && matmul_type_supported(w.type) && w.rows > 0 && w.cols > 0);
  DF_CHECK(a.ids != nullptr && a.out != nullptr && a.n >= 0 && a.n <= 0x7fffffff);
  DF_CHECK(a.slot_of == nullptr || a.n_ids > 0);
  if (w.type == GgmlType::Q4_0 || w.type == GgmlType::Q8_0) DF_CHECK(w.cols % dev::kQK == 0);
  if (kq::piece_type(w.type)) DF_CHECK(w.cols % kq::block_elems(w.type) == 0);
  DF_CHECK(reinterpret_cast<uintptr_t>(w.data) % 2 == 0 && w.row_bytes % 2 == 0);
  if (a.n == 0) return;
  const unsigned grid = unsigned(a.n);
  switch (w.type) {
#define DF_GET_ROWS_CASE(T)                                                                                     \
  case T:                                                                                                       \
    get_rows_kernel<T><<<grid, kThreads, 0, a.stream>>>(w.data, w.rows, w.cols, w.row_bytes, a.ids, a.slot_of, \
                                                        a.n_ids, a.out);                                       \
    break;
    DF_GET_ROWS_CASE(GgmlType::Q4_0)
    DF_GET_ROWS_CASE(GgmlType::Q8_0)
    DF_GET_ROWS_CASE(GgmlType::Q4_1)
    DF_GET_ROWS_CASE(GgmlType::Q5_0)
    DF_GET_ROWS_CASE(GgmlType::Q5_1)
    DF_GET_ROWS_CASE(GgmlType::IQ4_NL)
    DF_GET_ROWS_CASE(GgmlType::Q2_K)
    DF_GET_ROWS_CASE(GgmlType::Q3_K)
    DF_GET_ROWS_CASE(GgmlType::Q4_K)
    DF_GET_ROWS_CASE(GgmlType::Q5_K)
    DF_GET_ROWS_CASE(GgmlType::Q6_K)
    DF_GET_ROWS_CASE(GgmlType::IQ4_XS)
    DF_GET_ROWS_CASE(GgmlType::F16)
    DF_GET_ROWS_CASE(GgmlType::BF16)
#undef DF_GET_ROWS_CASE
    default:
      DF_CHECK(reinterpret_cast<uintptr_t>(w.data) % 4 == 0 && w.row_bytes % 4 == 0);
      get_rows_kernel<GgmlType::F32><<<grid, kThreads, 0, a.stream>>>(w.data, w.rows, w.cols, w.row_bytes, a.ids,
                                                                      a.slot_of, a.n_ids, a.out);
      break;
  }
  DF_CUDA_CHECK_LAUNCH();
}

}  // namespace df::cuda
