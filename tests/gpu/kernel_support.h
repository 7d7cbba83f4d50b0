// Random inputs for the kernel tests, on the host and as device copies.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "diskformer/backend/cpu/kernels.h"
#include "diskformer/backend/cpu/numeric.h"
#include "diskformer/cudart/buffer.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/model/weights.h"

namespace df::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A weight matrix in file layout: bytes on the host plus its row geometry.
struct HostMat {
  gguf::GgmlType type = gguf::GgmlType::F32;
  int64_t rows = 0, cols = 0;
  uint64_t row_bytes = 0;
  std::vector<uint8_t> bytes;

  model::Mat mat() const { return {type, bytes.data(), cols, rows, row_bytes}; }
};

inline uint64_t row_bytes_of(gguf::GgmlType t, int64_t cols) {
  switch (t) {
    case gguf::GgmlType::Q4_0: return uint64_t(cols / 32) * sizeof(cpu::BlockQ4_0);
    case gguf::GgmlType::Q8_0: return uint64_t(cols / 32) * sizeof(cpu::BlockQ8_0);
    case gguf::GgmlType::F16:
    case gguf::GgmlType::BF16: return uint64_t(cols) * 2;
    case gguf::GgmlType::F32: return uint64_t(cols) * 4;
    default: return gguf::row_bytes(t, uint64_t(cols));
  }
}

// Where a block of the K-quant, IQ4 and offset types keeps its f16 scales (random bytes there may be NaN or huge):
// byte offsets within the block, up to two.
inline std::vector<int> f16_fields(gguf::GgmlType t) {
  using gguf::GgmlType;
  switch (t) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q5_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: return {0};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    case GgmlType::Q6_K: return {208};
    default: return {};
  }
}

// Random weights of any supported type: quantized ones with random scales and every code value in use.
inline HostMat random_mat(gguf::GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  HostMat m{t, rows, cols, row_bytes_of(t, cols), {}};
  m.bytes.resize(m.row_bytes * rows);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  std::uniform_real_distribution<float> val(-1.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = m.bytes.data() + r * m.row_bytes;
    if (t == gguf::GgmlType::Q4_0) {
      auto* b = reinterpret_cast<cpu::BlockQ4_0*>(row);
      for (int64_t j = 0; j < cols / 32; ++j) {
        b[j].d = cpu::f32_to_f16(scale(rng));
        for (auto& q : b[j].qs) q = uint8_t(rng() & 0xff);
      }
    } else if (t == gguf::GgmlType::Q8_0) {
      auto* b = reinterpret_cast<cpu::BlockQ8_0*>(row);
      for (int64_t j = 0; j < cols / 32; ++j) {
        b[j].d = cpu::f32_to_f16(scale(rng));
        for (auto& q : b[j].qs) q = int8_t(int(rng() % 255) - 127);
      }
    } else if (!f16_fields(t).empty()) {
      // Every other byte random (codes, packed sub-block scales), the f16 scales small and finite.
      const gguf::TypeInfo* ti = gguf::type_info(t);
      for (uint64_t i = 0; i < m.row_bytes; ++i) row[i] = uint8_t(rng() & 0xff);
      for (uint64_t b = 0; b < m.row_bytes / ti->block_bytes; ++b)
        for (int off : f16_fields(t)) {
          const uint16_t h = cpu::f32_to_f16(scale(rng) * (off == 0 ? 1.0f : 0.5f));
          std::memcpy(row + b * ti->block_bytes + off, &h, 2);
        }
    } else if (t == gguf::GgmlType::F16 || t == gguf::GgmlType::BF16) {
      auto* h = reinterpret_cast<uint16_t*>(row);
      for (int64_t i = 0; i < cols; ++i) h[i] = t == gguf::GgmlType::F16 ? cpu::f32_to_f16(val(rng)) : cpu::f32_to_bf16(val(rng));
    } else {
      auto* f = reinterpret_cast<float*>(row);
      for (int64_t i = 0; i < cols; ++i) f[i] = val(rng);
    }
  }
  return m;
}

inline model::Mat dmat(const HostMat& m, const cuda::DeviceBuffer& dev) {
  return {m.type, dev.as<uint8_t>(), m.cols, m.rows, m.row_bytes};
}

inline cpu::Context scalar_context() {
  cpu::Context ctx;
  ctx.kernels = &cpu::scalar_kernels();
  return ctx;
}

// sum |w_i * a_i| of row r of w with x (dequantized weights): the scale of a dot product's rounding error.
inline double abs_dot(const HostMat& m, int64_t r, const float* x) {
  std::vector<float> w(m.cols);
  cpu::get_row(m.mat(), r, w.data());
  double s = 0;
  for (int64_t i = 0; i < m.cols; ++i) s += std::fabs(double(w[i]) * double(x[i]));
  return s;
}

// The worst-case difference of two f32 summation orders of n terms whose absolute sum is abs_sum: each order's
// error is at most (its longest chain of additions) * 2^-24 * abs_sum; the CPU chains n/8 + 3, the GPU n/32 + 5.
inline double sum_order_tolerance(int64_t n_terms, double abs_sum) {
  return 2.0 * double(n_terms / 8 + 8) * std::ldexp(1.0, -24) * abs_sum + 1e-30;
}

// Random Q4_0 bytes with small finite scales (a random f16 scale may be NaN or huge): large matrices quickly.
inline HostMat random_q4(int64_t rows, int64_t cols, uint32_t seed) {
  HostMat m{gguf::GgmlType::Q4_0, rows, cols, row_bytes_of(gguf::GgmlType::Q4_0, cols), {}};
  m.bytes.resize(m.row_bytes * rows);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= m.bytes.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(m.bytes.data() + i, &r, 8);
  }
  auto* b = reinterpret_cast<cpu::BlockQ4_0*>(m.bytes.data());
  for (int64_t j = 0; j < rows * cols / 32; ++j) b[j].d = cpu::f32_to_f16(0.01f + 0.001f * float(j % 7));
  return m;
}

// n values of T from a device buffer, after the device finished its work.
template <typename T>
std::vector<T> download(const cuda::DeviceBuffer& b, size_t n) {
  DF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> v(n);
  b.download(v.data(), n * sizeof(T));
  return v;
}

// Milliseconds per call of fn, averaged over `iters` calls after one warm-up.
template <typename Fn>
double time_ms(int iters, Fn fn) {
  fn();
  cudaEvent_t a, b;
  DF_CUDA_CHECK(cudaEventCreate(&a));
  DF_CUDA_CHECK(cudaEventCreate(&b));
  DF_CUDA_CHECK(cudaEventRecord(a));
  for (int i = 0; i < iters; ++i) fn();
  DF_CUDA_CHECK(cudaEventRecord(b));
  DF_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  DF_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  DF_CUDA_CHECK(cudaEventDestroy(a));
  DF_CUDA_CHECK(cudaEventDestroy(b));
  return double(ms) / iters;
}

}  // namespace df::test
