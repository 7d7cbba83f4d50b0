// Helpers of the CPU kernel tests: the kernel tables, random weight rows of every type, and activation rows
// quantized as the products take them.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "diskformer/backend/cpu/kernels.h"
#include "diskformer/gguf/types.h"

namespace df::cpu {

inline std::vector<const Kernels*> simd_tables() {
  std::vector<const Kernels*> out;
  if (auto k = avx2_kernels()) out.push_back(k);
  if (auto k = avx512_kernels()) out.push_back(k);
  return out;
}

inline std::vector<const Kernels*> all_tables() {
  std::vector<const Kernels*> all = simd_tables();
  all.push_back(&scalar_kernels());
  return all;
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Random weights of type t: random code bytes, f16 scales small and positive (offsets of either sign).
inline std::vector<uint8_t> random_weights(gguf::GgmlType t, int64_t n, uint64_t seed) {
  using gguf::GgmlType;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> w(gguf::row_bytes(t, uint64_t(n)));
  for (auto& b : w) b = uint8_t(rng());
  auto scale = [&] { return f32_to_f16(0.001f + float(rng() % 1000) * 2e-5f); };
  auto offset = [&] { return f32_to_f16((float(rng() % 2001) - 1000.0f) * 1e-4f); };
  auto each = [&](auto* blocks, size_t count, auto fix) {
    for (size_t i = 0; i < count; ++i) fix(blocks[i]);
  };
  const size_t n32 = size_t(n / 32), n256 = size_t(n / 256);
  switch (t) {
    case GgmlType::Q4_0: each(reinterpret_cast<BlockQ4_0*>(w.data()), n32, [&](auto& b) { b.d = scale(); }); break;
    case GgmlType::Q4_1:
      each(reinterpret_cast<BlockQ4_1*>(w.data()), n32, [&](auto& b) { b.d = scale(), b.m = offset(); });
      break;
    case GgmlType::Q5_0: each(reinterpret_cast<BlockQ5_0*>(w.data()), n32, [&](auto& b) { b.d = scale(); }); break;
    case GgmlType::Q5_1:
      each(reinterpret_cast<BlockQ5_1*>(w.data()), n32, [&](auto& b) { b.d = scale(), b.m = offset(); });
      break;
    case GgmlType::IQ4_NL: each(reinterpret_cast<BlockIQ4_NL*>(w.data()), n32, [&](auto& b) { b.d = scale(); }); break;
    case GgmlType::Q2_K:
      each(reinterpret_cast<BlockQ2_K*>(w.data()), n256, [&](auto& b) { b.d = scale(), b.dmin = scale(); });
      break;
    case GgmlType::Q3_K: each(reinterpret_cast<BlockQ3_K*>(w.data()), n256, [&](auto& b) { b.d = scale(); }); break;
    case GgmlType::Q4_K:
      each(reinterpret_cast<BlockQ4_K*>(w.data()), n256, [&](auto& b) { b.d = scale(), b.dmin = scale(); });
      break;
    case GgmlType::Q5_K:
      each(reinterpret_cast<BlockQ5_K*>(w.data()), n256, [&](auto& b) { b.d = scale(), b.dmin = scale(); });
      break;
    case GgmlType::Q6_K: each(reinterpret_cast<BlockQ6_K*>(w.data()), n256, [&](auto& b) { b.d = scale(); }); break;
    case GgmlType::IQ4_XS: each(reinterpret_cast<BlockIQ4_XS*>(w.data()), n256, [&](auto& b) { b.d = scale(); }); break;
    default: ADD_FAILURE() << "no random weights for " << gguf::type_name(t);
  }
  return w;
}

// A quantized activation row of n values for weights of type t, and its dequantized values.
struct Act {
  std::vector<uint8_t> bytes;
  std::vector<double> values;
  std::vector<float> block_sums;  // Q8_1: the f16 block sums s the offsets multiply (rounded, so a looser bound)
};
inline Act quantize_for(gguf::GgmlType t, const std::vector<float>& x) {
  using gguf::GgmlType;
  const Kernels& s = scalar_kernels();
  const int64_t n = int64_t(x.size());
  Act a;
  a.values.resize(x.size());
  if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1) {
    std::vector<BlockQ8_1> b(size_t(n / 32));
    s.quantize_q8_1(x.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) a.values[size_t(i)] = double(b[size_t(i / 32)].qs[i % 32]) * f16_to_f32(b[size_t(i / 32)].d);
    for (const auto& blk : b) a.block_sums.push_back(f16_to_f32(blk.s));
    a.bytes.assign(reinterpret_cast<uint8_t*>(b.data()), reinterpret_cast<uint8_t*>(b.data() + b.size()));
  } else if (gguf::type_info(t)->block_elems == 256) {
    std::vector<BlockQ8_K> b(size_t(n / 256));
    s.quantize_q8_k(x.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) a.values[size_t(i)] = double(b[size_t(i / 256)].qs[i % 256]) * b[size_t(i / 256)].d;
    a.bytes.assign(reinterpret_cast<uint8_t*>(b.data()), reinterpret_cast<uint8_t*>(b.data() + b.size()));
  } else {
    std::vector<BlockQ8_0> b(size_t(n / 32));
    s.quantize_q8_0(x.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) a.values[size_t(i)] = double(b[size_t(i / 32)].qs[i % 32]) * f16_to_f32(b[size_t(i / 32)].d);
    a.bytes.assign(reinterpret_cast<uint8_t*>(b.data()), reinterpret_cast<uint8_t*>(b.data() + b.size()));
  }
  return a;
}

}  // namespace df::cpu
