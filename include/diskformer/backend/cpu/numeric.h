// Number formats of the CPU backend: half and bfloat16 conversions and the ggml quantization blocks.
// Conversions round to nearest even, as the F16C instructions and ggml's reference code do.
#pragma once

#include <cstdint>
#include <cstring>

namespace df::cpu {

// 32 weights: qs[i] holds element i in its low nibble and element i + 16 in its high nibble;
// value = (nibble - 8) * d.
struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18);

// 32 values: value = qs[i] * d.
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34);

constexpr int kQK = 32;  // elements per Q4_0 / Q8_0 block

// Exact, by bit manipulation (a _Float16 conversion compiles to a library call without F16C).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    const float sub = float(mant) * 5.9604644775390625e-08f;  // mant * 2^-24, exact (zero included)
    std::memcpy(&bits, &sub, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t f32_to_f16(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 64);  // quiet NaN
  return uint16_t((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

}  // namespace df::cpu
