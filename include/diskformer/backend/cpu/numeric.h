// Number formats of the CPU backend: half and bfloat16 conversions and the ggml quantization blocks (the layouts of
// ggml-common.h, described here element by element).
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

constexpr int kQK = 32;  // elements per Q4_0 / Q8_0 block (and every other 32-element block below)

// 32 weights: nibbles as in Q4_0; value = nibble * d + m.
struct BlockQ4_1 {
  uint16_t d, m;  // f16 scale and offset
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20);

// 32 weights: nibbles as in Q4_0, bit i of qh (little-endian) is element i's fifth bit; value = (q - 16) * d.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22);

// 32 weights: five-bit codes as in Q5_0; value = q * d + m.
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24);

// 32 activations: value = qs[i] * d; s = f16(d * sum(qs)), the block sum that Q4_1/Q5_1 offsets multiply.
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_1) == 36);

// 32 weights: nibbles as in Q4_0 index a fixed non-linear table; value = kIQ4NLValues[nibble] * d.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// The K-quants: super-blocks of 256 elements with 16 or 8 sub-block scales.
constexpr int kQK_K = 256;

// 16 sub-blocks of 16: element e has the 2-bit code (qs[32 * (e / 128) + e % 32] >> 2 * (e % 128 / 32)) & 3;
// scales[e / 16] holds its scale (low nibble) and min (high nibble); value = d * scale * q - dmin * min.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;  // f16
};
static_assert(sizeof(BlockQ2_K) == 84);

// 16 sub-blocks of 16: the low two bits as in Q2_K, bit e / 32 of hmask[e % 32] the third (set: +0, clear: -4);
// twelve bytes pack sixteen 6-bit scales (bias 32); value = d * (scale - 32) * q.
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// 8 sub-blocks of 32: element e is nibble (e / 32) % 2 of qs[32 * (e / 64) + e % 32]; twelve bytes pack eight
// 6-bit scales and eight 6-bit mins (see kquant_scale_min); value = d * scale * q - dmin * min.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q4_K with a fifth bit: bit e / 32 of qh[e % 32] adds 16.
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176);

// 16 sub-blocks of 16: element e = 128 n + 32 g + l has the low nibble (g / 2 ? high : low) of
// ql[64 n + 32 (g % 2) + l] and the high two bits (qh[32 n + l] >> 2 g) & 3; value = d * scales[e / 16] * (q - 32).
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// 256 activations: value = qs[i] * d (d a plain float); bsums[j] = sum of qs[16 j .. 16 j + 15].
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// 8 sub-blocks of 32, coded as IQ4_NL blocks without their own scale: sub-block b has the 6-bit scale
// ((scales_l[b / 2] >> 4 (b % 2)) & 15) | ((scales_h >> 2 b) & 3) << 4, bias 32; value = d * (scale - 32) * table.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// Scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block: 6 bits each, the first four pairs in the low
// six bits of bytes 0..7, the last four split over bytes 8..11 and the top two bits of bytes 0..7.
inline void kquant_scale_min(int j, const uint8_t* q, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = uint8_t((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The twelve bytes holding eight 6-bit scales and mins (the inverse of kquant_scale_min).
inline void kquant_pack_scale_min(const uint8_t scale[8], const uint8_t min[8], uint8_t q[12]) {
  for (int j = 0; j < 4; ++j) {
    q[j] = uint8_t((scale[j] & 63) | (scale[j + 4] >> 4) << 6);
    q[j + 4] = uint8_t((min[j] & 63) | (min[j + 4] >> 4) << 6);
    q[j + 8] = uint8_t((scale[j + 4] & 15) | (min[j + 4] & 15) << 4);
  }
}

// Scale j (0..15) of a Q3_K super-block, bias included (-32..31).
inline int q3_k_scale(int j, const uint8_t* s) {
  const int low = j < 8 ? s[j] & 0x0f : s[j - 8] >> 4;
  const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Scale of sub-block b (0..7) of an IQ4_XS super-block, bias included (-32..31).
inline int iq4_xs_scale(int b, const BlockIQ4_XS& x) {
  return (((x.scales_l[b / 2] >> (4 * (b % 2))) & 0x0f) | (((x.scales_h >> (2 * b)) & 3) << 4)) - 32;
}

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
