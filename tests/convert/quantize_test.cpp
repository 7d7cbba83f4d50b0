// ggml's reference quantizers on hand-computed blocks: scale, rounding rule, clamping, nibble order.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "diskformer/convert/quantize.h"

namespace df::convert {
namespace {

uint16_t scale_bits(const uint8_t* block) {
  uint16_t d;
  std::memcpy(&d, block, 2);
  return d;
}

TEST(F16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(0.1f), 0x2E66);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);          // halfway to the next binade rounds up to infinity
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie, even mantissa stays
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie, odd mantissa rounds up
  for (uint16_t h : {0x0001, 0x03FF, 0x0400, 0x3C00, 0x3555, 0x7BFF, 0xC000, 0x8001})
    EXPECT_EQ(f32_to_f16(f16_to_f32(h)), h) << h;
}

TEST(Q8_0, HandComputedBlock) {
  std::array<float, 32> x;
  for (int i = 0; i < 32; ++i) x[i] = float(i - 16);  // -16 .. 15
  std::array<uint8_t, 34> b;
  quantize_q8_0(x.data(), 32, b.data());
  // d = 16/127 = 0.1259843 -> f16 0x3008 (0.125 * (1 + 8/1024)); codes round(x * 127/16).
  EXPECT_EQ(scale_bits(b.data()), 0x3008);
  auto q = [&](int i) { return int(int8_t(b[2 + i])); };
  EXPECT_EQ(q(0), -127);
  EXPECT_EQ(q(16), 0);
  EXPECT_EQ(q(17), 8);   // 7.9375
  EXPECT_EQ(q(18), 16);  // 15.875
  EXPECT_EQ(q(15), -8);
  EXPECT_EQ(q(31), 119);  // 119.0625
}

TEST(Q8_0, HalvesRoundAwayFromZero) {
  std::array<float, 32> x{};
  x[0] = 127.0f;  // d = 1 exactly
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  std::array<uint8_t, 34> b;
  quantize_q8_0(x.data(), 32, b.data());
  EXPECT_EQ(scale_bits(b.data()), 0x3C00);
  EXPECT_EQ(int8_t(b[3]), 3);  // roundf, not round-to-even (which gives 2)
  EXPECT_EQ(int8_t(b[4]), -3);
  EXPECT_EQ(int8_t(b[5]), 1);
}

TEST(Q8_0, ZeroBlock) {
  std::array<float, 32> x{};
  std::array<uint8_t, 34> b;
  b.fill(0xAA);
  quantize_q8_0(x.data(), 32, b.data());
  for (uint8_t v : b) EXPECT_EQ(v, 0);
}

TEST(Q4_0, HandComputedBlockNegativeMax) {
  std::array<float, 32> x{};
  x[0] = -8.0f;   // largest magnitude, negative: d = -8 / -8 = 1
  x[1] = 7.0f;    // 15.5 -> 15
  x[2] = 7.4f;    // 15.9 -> 15
  x[3] = -0.6f;   // 7.9 -> 7 (truncation)
  x[4] = 0.49f;   // 8.99 -> 8
  x[16] = 3.0f;   // 11.5 -> 11, high nibble of byte 0
  x[17] = -3.0f;  // 5.5 -> 5, high nibble of byte 1
  std::array<uint8_t, 18> b;
  quantize_q4_0(x.data(), 32, b.data());
  EXPECT_EQ(scale_bits(b.data()), 0x3C00);
  EXPECT_EQ(b[2], 0x00 | (11 << 4));
  EXPECT_EQ(b[3], 15 | (5 << 4));
  EXPECT_EQ(b[4], 15 | (8 << 4));
  EXPECT_EQ(b[5], 7 | (8 << 4));
  EXPECT_EQ(b[6], 8 | (8 << 4));
}

TEST(Q4_0, PositiveMaxClampsToFifteen) {
  std::array<float, 32> x{};
  x[0] = 8.0f;   // d = 8 / -8 = -1: code int(-8 + 8.5) = 0
  x[1] = -8.0f;  // int(8 + 8.5) = 16, clamped to 15
  x[2] = 1.0f;   // int(-1 + 8.5) = 7
  std::array<uint8_t, 18> b;
  quantize_q4_0(x.data(), 32, b.data());
  EXPECT_EQ(scale_bits(b.data()), 0xBC00);
  EXPECT_EQ(b[2] & 15, 0);
  EXPECT_EQ(b[3] & 15, 15);
  EXPECT_EQ(b[4] & 15, 7);
  std::array<float, 32> y;
  dequantize_q4_0(b.data(), 32, y.data());
  EXPECT_EQ(y[0], 8.0f);
  EXPECT_EQ(y[1], -7.0f);  // the clamp costs the far end one step
  EXPECT_EQ(y[2], 1.0f);
  EXPECT_EQ(y[5], 0.0f);
}

TEST(Quantize, RoundTripErrorWithinHalfAStep) {
  std::vector<float> x(32 * 64);
  uint32_t s = 12345;
  for (float& v : x) {
    s = s * 1664525u + 1013904223u;
    v = (float(s >> 8) / 16777216.0f - 0.5f) * 3.0f;
  }
  std::vector<uint8_t> q8(64 * 34), q4(64 * 18);
  std::vector<float> y8(x.size()), y4(x.size());
  quantize_q8_0(x.data(), int64_t(x.size()), q8.data());
  quantize_q4_0(x.data(), int64_t(x.size()), q4.data());
  dequantize_q8_0(q8.data(), int64_t(x.size()), y8.data());
  dequantize_q4_0(q4.data(), int64_t(x.size()), y4.data());
  for (size_t blk = 0; blk < 64; ++blk) {
    uint16_t d8, d4;
    std::memcpy(&d8, q8.data() + blk * 34, 2);
    std::memcpy(&d4, q4.data() + blk * 18, 2);
    const float s8 = std::fabs(f16_to_f32(d8)), s4 = std::fabs(f16_to_f32(d4));
    for (size_t i = blk * 32; i < blk * 32 + 32; ++i) {
      // Codes are rounded with the f32 scale, values rebuilt with its f16 rounding: up to 127 * 2^-11 more.
      EXPECT_LE(std::fabs(x[i] - y8[i]), 0.565f * s8) << i;
      EXPECT_LE(std::fabs(x[i] - y4[i]), 1.0f * s4 * 1.01f) << i;  // the clamped end may lose a whole step
    }
  }
}

TEST(Encode, RefusesPartialBlocksAndUnknownTypes) {
  std::vector<float> x(48, 1.0f);
  std::vector<uint8_t> out(1024);
  EXPECT_FALSE(encode(gguf::GgmlType::Q8_0, x, out.data()).ok());
  EXPECT_FALSE(encode(gguf::GgmlType::Q4_K, std::span<const float>(x.data(), 32), out.data()).ok());
  ASSERT_TRUE(encode(gguf::GgmlType::F16, x, out.data()).ok());
  uint16_t h;
  std::memcpy(&h, out.data() + 2 * 47, 2);
  EXPECT_EQ(h, 0x3C00);
}

}  // namespace
}  // namespace df::convert
