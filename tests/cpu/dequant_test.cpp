// Dequantization against blocks packed here from known codes and scales, following ggml-common.h's layouts as
// numeric.h describes them: every value must come out as scale * code (- min), computed in float.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "diskformer/backend/cpu/dequant.h"
#include "diskformer/backend/cpu/numeric.h"

namespace df::cpu {
namespace {

using gguf::GgmlType;

std::vector<float> dequant(GgmlType t, const void* blocks, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t, static_cast<const uint8_t*>(blocks), n, out.data());
  return out;
}

// The 32 nibbles of a Q4_0-style block: element i in the low nibble of byte i (i < 16), else the high of i - 16.
void pack_nibbles(const int* codes, uint8_t qs[16]) {
  for (int i = 0; i < 16; ++i) qs[i] = uint8_t(codes[i] | codes[i + 16] << 4);
}

TEST(Dequant, ThirtyTwoElementBlocks) {
  std::mt19937 rng(1);
  int c4[32], c5[32];
  for (int i = 0; i < 32; ++i) c4[i] = int(rng() % 16), c5[i] = int(rng() % 32);
  const float d = 0.25f, m = -1.5f;
  BlockQ4_1 q41{f32_to_f16(d), f32_to_f16(m), {}};
  pack_nibbles(c4, q41.qs);
  BlockQ5_0 q50{f32_to_f16(d), {}, {}};
  BlockQ5_1 q51{f32_to_f16(d), f32_to_f16(m), {}, {}};
  int low[32];
  uint32_t qh = 0;
  for (int i = 0; i < 32; ++i) low[i] = c5[i] & 15, qh |= uint32_t(c5[i] >> 4) << i;
  pack_nibbles(low, q50.qs);
  pack_nibbles(low, q51.qs);
  std::memcpy(q50.qh, &qh, 4);
  std::memcpy(q51.qh, &qh, 4);
  BlockIQ4_NL nl{f32_to_f16(d), {}};
  pack_nibbles(c4, nl.qs);
  const auto v41 = dequant(GgmlType::Q4_1, &q41, 32), v50 = dequant(GgmlType::Q5_0, &q50, 32),
             v51 = dequant(GgmlType::Q5_1, &q51, 32), vnl = dequant(GgmlType::IQ4_NL, &nl, 32);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(v41[size_t(i)], float(c4[i]) * d + m) << i;
    EXPECT_EQ(v50[size_t(i)], float(c5[i] - 16) * d) << i;
    EXPECT_EQ(v51[size_t(i)], float(c5[i]) * d + m) << i;
    EXPECT_EQ(vnl[size_t(i)], d * float(kIQ4NLValues[c4[i]])) << i;
  }
}

// Six-bit scales and mins of Q4_K / Q5_K into their twelve bytes (the inverse of kquant_scale_min).
void pack_scales_mins(const int sc[8], const int mn[8], uint8_t q[12]) {
  for (int j = 0; j < 4; ++j) {
    q[j] = uint8_t(sc[j] | (sc[j + 4] >> 4) << 6);
    q[j + 4] = uint8_t(mn[j] | (mn[j + 4] >> 4) << 6);
    q[j + 8] = uint8_t((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
  }
}

TEST(Dequant, Q4KAndQ5K) {
  std::mt19937 rng(2);
  const int sc[8] = {1, 2, 3, 63, 17, 33, 49, 63}, mn[8] = {0, 5, 10, 15, 20, 40, 60, 63};
  int code[256];
  for (int& c : code) c = int(rng() % 32);
  const float d = 0.125f, dmin = 0.0625f;
  BlockQ4_K q4{f32_to_f16(d), f32_to_f16(dmin), {}, {}};
  BlockQ5_K q5{f32_to_f16(d), f32_to_f16(dmin), {}, {}, {}};
  pack_scales_mins(sc, mn, q4.scales);
  pack_scales_mins(sc, mn, q5.scales);
  for (int e = 0; e < 256; ++e) {
    // Element e: nibble (e / 32) % 2 of qs[32 (e / 64) + e % 32]; Q5_K's fifth bit e / 32 of qh[e % 32].
    const int byte = 32 * (e / 64) + e % 32, shift = 4 * (e / 32 % 2);
    q4.qs[byte] = uint8_t(q4.qs[byte] | (code[e] & 15) << shift);
    q5.qs[byte] = uint8_t(q5.qs[byte] | (code[e] & 15) << shift);
    q5.qh[e % 32] = uint8_t(q5.qh[e % 32] | (code[e] >> 4) << (e / 32));
  }
  const auto v4 = dequant(GgmlType::Q4_K, &q4, 256), v5 = dequant(GgmlType::Q5_K, &q5, 256);
  for (int e = 0; e < 256; ++e) {
    const float d1 = d * float(sc[e / 32]), m1 = dmin * float(mn[e / 32]);
    EXPECT_EQ(v4[size_t(e)], d1 * float(code[e] & 15) - m1) << e;
    EXPECT_EQ(v5[size_t(e)], d1 * float(code[e]) - m1) << e;
  }
}

TEST(Dequant, Q2KQ3KQ6K) {
  std::mt19937 rng(3);
  int c2[256], c3[256], c6[256], s3[16], s6[16], s2[16], m2[16];
  for (int e = 0; e < 256; ++e) c2[e] = int(rng() % 4), c3[e] = int(rng() % 8) - 4, c6[e] = int(rng() % 64);
  for (int j = 0; j < 16; ++j)
    s3[j] = int(rng() % 64) - 32, s6[j] = int(rng() % 256) - 128, s2[j] = int(rng() % 16), m2[j] = int(rng() % 16);
  const float d = 0.5f, dmin = 0.25f;
  BlockQ2_K q2{};
  BlockQ3_K q3{};
  BlockQ6_K q6{};
  q2.d = f32_to_f16(d), q2.dmin = f32_to_f16(dmin), q3.d = f32_to_f16(d), q6.d = f32_to_f16(d);
  for (int j = 0; j < 16; ++j) {
    q2.scales[j] = uint8_t(s2[j] | m2[j] << 4);
    // Q3_K: the low four bits of scale j in byte j (j < 8) or the high nibble of byte j - 8, the top two bits in
    // byte 8 + j % 4 at bit 2 (j / 4).
    const int u = s3[j] + 32;
    if (j < 8) {
      q3.scales[j] = uint8_t(q3.scales[j] | (u & 15));
    } else {
      q3.scales[j - 8] = uint8_t(q3.scales[j - 8] | (u & 15) << 4);
    }
    q3.scales[8 + j % 4] = uint8_t(q3.scales[8 + j % 4] | (u >> 4) << (2 * (j / 4)));
    q6.scales[j] = int8_t(s6[j]);
  }
  for (int e = 0; e < 256; ++e) {
    const int byte = 32 * (e / 128) + e % 32, shift = 2 * (e % 128 / 32);
    q2.qs[byte] = uint8_t(q2.qs[byte] | c2[e] << shift);
    // Q3_K: a set high bit means the code is the low two bits, a clear one subtracts 4.
    const bool high = c3[e] >= 0;
    q3.qs[byte] = uint8_t(q3.qs[byte] | (high ? c3[e] : c3[e] + 4) << shift);
    if (high) q3.hmask[e % 32] = uint8_t(q3.hmask[e % 32] | 1 << (e / 32));
    // Q6_K: element 128 n + 32 g + l.
    const int nn = e / 128, g = e % 128 / 32, l = e % 32;
    q6.ql[64 * nn + 32 * (g % 2) + l] = uint8_t(q6.ql[64 * nn + 32 * (g % 2) + l] | (c6[e] & 15) << (4 * (g / 2)));
    q6.qh[32 * nn + l] = uint8_t(q6.qh[32 * nn + l] | (c6[e] >> 4) << (2 * g));
  }
  const auto v2 = dequant(GgmlType::Q2_K, &q2, 256), v3 = dequant(GgmlType::Q3_K, &q3, 256),
             v6 = dequant(GgmlType::Q6_K, &q6, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 16;
    EXPECT_EQ(v2[size_t(e)], d * float(s2[j]) * float(c2[e]) - dmin * float(m2[j])) << e;
    EXPECT_EQ(v3[size_t(e)], d * float(s3[j]) * float(c3[e])) << e;
    EXPECT_EQ(v6[size_t(e)], d * float(s6[j]) * float(c6[e] - 32)) << e;
  }
}

TEST(Dequant, IQ4XS) {
  std::mt19937 rng(4);
  int code[256], sc[8];
  for (int& c : code) c = int(rng() % 16);
  for (int& s : sc) s = int(rng() % 64) - 32;
  BlockIQ4_XS x{};
  x.d = f32_to_f16(0.75f);
  for (int b = 0; b < 8; ++b) {
    const int u = sc[b] + 32;
    x.scales_l[b / 2] = uint8_t(x.scales_l[b / 2] | (u & 15) << (4 * (b % 2)));
    x.scales_h = uint16_t(x.scales_h | (u >> 4) << (2 * b));
    pack_nibbles(code + 32 * b, x.qs + 16 * b);
  }
  const auto v = dequant(GgmlType::IQ4_XS, &x, 256);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(v[size_t(e)], 0.75f * float(sc[e / 32]) * float(kIQ4NLValues[code[e]])) << e;
}

TEST(Dequant, EveryMatmulTypeHasARow) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS})
    EXPECT_TRUE(dequant_supported(t)) << gguf::type_name(t);
  for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ1_S, GgmlType::TQ1_0, GgmlType::MXFP4, GgmlType::Q8_K})
    EXPECT_FALSE(dequant_supported(t)) << gguf::type_name(t);
}

}  // namespace
}  // namespace df::cpu
