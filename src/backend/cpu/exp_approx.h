// The exponential of llama.cpp's vectorized CPU code (ggml_v_expf on AVX2), which its SIMD softmax and SiLU use
// instead of libm's expf: x = n ln2 + b with n rounded to an integer, exp(b) - 1 by a degree-5 polynomial in b,
// scaled by 2^n through the exponent bits; inputs whose n is beyond +-126 take a two-factor scale (overflow to
// infinity above ~88.38, flush to zero below ~-103.97). Within 1.5 ulp of expf, and its results differ from expf's
// in the last bit often enough to change a greedy completion, so the CPU kernels reproduce it exactly: every step
// below is one rounding, as in the vector code (fma: one rounding for a * b + c).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace df::cpu {

namespace exp_approx {

inline constexpr float kShift = 0x1.8p23f;       // adding it rounds x / ln2 to an integer in the low bits
inline constexpr float kInvLn2 = 0x1.715476p+0f;
inline constexpr float kLn2Hi = 0x1.62e4p-1f;    // ln2 split in two for an exact reduction
inline constexpr float kLn2Lo = 0x1.7f7d1cp-20f;
inline constexpr float kP0 = 0x1.ffffecp-1f;     // exp(b) - 1 ~ b (P0 + b (P1 + b (P2 + b (P3 + b P4))))
inline constexpr float kP1 = 0x1.fffdb6p-2f;
inline constexpr float kP2 = 0x1.555e66p-3f;
inline constexpr float kP3 = 0x1.573e2ep-5f;
inline constexpr float kP4 = 0x1.0e4020p-7f;

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace exp_approx

inline float exp_approx_f32(float x) {
  using namespace exp_approx;
  const float z = std::fma(x, kInvLn2, kShift);
  const float n = z - kShift;
  const float b = std::fma(-n, kLn2Lo, std::fma(-n, kLn2Hi, x));
  const uint32_t e = bits(z) << 23;
  const float k = from_bits(e + bits(1.0f));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(kP4, b, kP3), u, std::fma(kP2, b, kP1)), u, kP0 * b);
  if (!(std::fabs(n) > 126.0f)) return std::fma(j, k, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = from_bits(g + 0x7f000000u);
  const float s2 = from_bits(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

}  // namespace df::cpu
