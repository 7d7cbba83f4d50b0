// Random tensor data of every type synth writes: valid codes and scales whose dequantized values are symmetric
// around zero (an asymmetric code set would bias every dot product, enough to collapse a model onto one token) and
// have about the requested standard deviation, scales varying from block to block.
#include <cmath>
#include <cstring>

#include "diskformer/backend/cpu/dequant.h"
#include "diskformer/backend/cpu/numeric.h"
#include "diskformer/synth/synth.h"
#include "diskformer/util/check.h"
#include "synth/rng.h"

namespace df::synth {

namespace {

using gguf::GgmlType;
using cpu::f32_to_bf16;
using cpu::f32_to_f16;

// Uniform nibbles 0..15 with 0 remapped to 8: codes 1..15 (values -7..7, zero twice as likely). The distribution
// is symmetric around 8, so dequantized weights have mean exactly zero; plain 0..15 minus 8 would bias every dot
// product by -0.5 per weight, enough to collapse a model onto one token.
uint64_t symmetric_nibbles(uint64_t x) {
  uint64_t z = ~x;
  uint64_t zero = z & (z >> 1) & (z >> 2) & (z >> 3) & 0x1111111111111111ULL;
  return x | (zero << 3);
}

// Standard deviation of the symmetric codes above: E[c^2] = 2 * (1 + 4 + ... + 49) / 16 = 17.5.
constexpr float kQ4CodeStd = 4.1833f;
// Q8_0 codes: bytes with -128 remapped to 0, so -127..127 (zero twice as likely): std ~ 73.3.
constexpr float kQ8CodeStd = 73.3f;

// Root mean square of q - c for q uniform on 0 .. n-1 and c = (n - 1) / 2: sqrt((n^2 - 1) / 12).
float centered_rms(int n) { return std::sqrt(float(n * n - 1) / 12.0f); }
// Root mean square of -k .. k with zero twice as likely (2k + 2 codes: the unpaired extreme remapped to zero).
float symmetric_rms(int k) { return std::sqrt(float(k * (k + 1) * (2 * k + 1)) / 3.0f / float(2 * k + 2)); }
// Root mean square of integers uniform on lo .. hi.
float uniform_rms(int lo, int hi) {
  double s = 0;
  for (int v = lo; v <= hi; ++v) s += double(v) * v;
  return float(std::sqrt(s / (hi - lo + 1)));
}
float table_rms() {
  double s = 0;
  for (int8_t v : cpu::kIQ4NLValues) s += double(v) * v;
  return float(std::sqrt(s / 16));
}

// d rounded to `bits` significant bits, so that d * (2k + 1) / 2 for a (bits - 1)-bit odd factor is exact in f16:
// the offsets that center Q4_K, Q5_K, Q2_K, Q4_1 and Q5_1 codes then cancel exactly.
float round_bits(float d, int bits) {
  int e;
  const float m = std::frexp(d, &e);
  return std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits);
}

float jitter(Rng& rng) { return 0.75f + 0.5f * rng.uniform(); }  // scales vary from block to block

// 32 codes of a 32-block into nibbles (element i low nibble of byte i, element i + 16 its high nibble).
void pack_nibbles(const int* c, uint8_t qs[16]) {
  for (int i = 0; i < 16; ++i) qs[i] = uint8_t(c[i] | c[i + 16] << 4);
}

// Q4_K / Q5_K: codes uniform on 0 .. 2^bits - 1, dmin = d (2^bits - 1) / 2 and each min equal to its scale, so
// value = d * scale * (q - (2^bits - 1) / 2), symmetric; 6-bit scales uniform on 32..63.
template <typename Block>
void q45_k(Rng& rng, float stddev, int bits, Block& x, uint8_t* qh) {
  const int levels = 1 << bits;
  const float d = round_bits(stddev / (centered_rms(levels) * uniform_rms(32, 63)) * jitter(rng), 11 - bits);
  x.d = f32_to_f16(d);
  x.dmin = f32_to_f16(d * float(levels - 1) / 2.0f);
  uint8_t sc[8];
  for (auto& s : sc) s = uint8_t(32 + rng.below(32));
  cpu::kquant_pack_scale_min(sc, sc, x.scales);
  std::memset(x.qs, 0, sizeof x.qs);
  if (qh) std::memset(qh, 0, 32);
  for (int e = 0; e < cpu::kQK_K; ++e) {
    const int q = int(rng.below(uint32_t(levels)));
    x.qs[32 * (e / 64) + e % 32] |= uint8_t((q & 15) << (4 * (e / 32 % 2)));
    if (qh) qh[e % 32] |= uint8_t((q >> 4) << (e / 32));
  }
}

void q6_k(Rng& rng, float stddev, cpu::BlockQ6_K& x) {
  x = {};
  x.d = f32_to_f16(stddev / (symmetric_rms(31) * uniform_rms(64, 127)) * jitter(rng));
  for (auto& s : x.scales) s = int8_t(64 + rng.below(64));
  for (int e = 0; e < cpu::kQK_K; ++e) {
    int q = int(rng.below(64));
    if (q == 0) q = 32;  // -32 has no mirror image
    const int n = e / 128, g = e % 128 / 32, l = e % 32;
    x.ql[64 * n + 32 * (g % 2) + l] |= uint8_t((q & 15) << (4 * (g / 2)));
    x.qh[32 * n + l] |= uint8_t((q >> 4) << (2 * g));
  }
}

void q3_k(Rng& rng, float stddev, cpu::BlockQ3_K& x) {
  x = {};
  x.d = f32_to_f16(stddev / (symmetric_rms(3) * uniform_rms(16, 31)) * jitter(rng));
  for (int j = 0; j < 16; ++j) {
    const int u = 32 + 16 + int(rng.below(16));  // scales 16..31, biased by 32
    if (j < 8) {
      x.scales[j] |= uint8_t(u & 15);
    } else {
      x.scales[j - 8] |= uint8_t((u & 15) << 4);
    }
    x.scales[8 + j % 4] |= uint8_t((u >> 4) << (2 * (j / 4)));
  }
  for (int e = 0; e < cpu::kQK_K; ++e) {
    int v = int(rng.below(8)) - 4;
    if (v == -4) v = 0;  // -4 has no mirror image
    const int byte = 32 * (e / 128) + e % 32, shift = 2 * (e % 128 / 32);
    x.qs[byte] |= uint8_t((v >= 0 ? v : v + 4) << shift);  // a set high bit keeps the code, a clear one takes 4
    if (v >= 0) x.hmask[e % 32] |= uint8_t(1 << (e / 32));
  }
}

void q2_k(Rng& rng, float stddev, cpu::BlockQ2_K& x) {
  // Codes 0..3, dmin = 1.5 d and each min equal to its scale: value = d * scale * (q - 1.5).
  x = {};
  const float d = round_bits(stddev / (centered_rms(4) * uniform_rms(8, 15)) * jitter(rng), 9);
  x.d = f32_to_f16(d);
  x.dmin = f32_to_f16(1.5f * d);
  for (auto& s : x.scales) {
    const uint8_t v = uint8_t(8 + rng.below(8));
    s = uint8_t(v | v << 4);
  }
  for (int e = 0; e < cpu::kQK_K; ++e)
    x.qs[32 * (e / 128) + e % 32] |= uint8_t(rng.below(4) << (2 * (e % 128 / 32)));
}

void iq4_xs(Rng& rng, float stddev, cpu::BlockIQ4_XS& x) {
  // The table is not symmetric; scales of either sign make the values so.
  x = {};
  x.d = f32_to_f16(stddev / (table_rms() * uniform_rms(16, 31)) * jitter(rng));
  for (int b = 0; b < 8; ++b) {
    const int mag = 16 + int(rng.below(16));
    const int u = (rng.below(2) ? mag : -mag) + 32;
    x.scales_l[b / 2] |= uint8_t((u & 15) << (4 * (b % 2)));
    x.scales_h = uint16_t(x.scales_h | (u >> 4) << (2 * b));
    int c[32];
    for (int& v : c) v = int(rng.below(16));
    pack_nibbles(c, x.qs + 16 * b);
  }
}

// 32 five-bit codes uniform on 0..31 (symmetric: 0 remapped to 16) into nibbles and the fifth-bit word.
void five_bit_codes(Rng& rng, bool symmetric, uint8_t qs[16], uint8_t qh_bytes[4]) {
  int low[32];
  uint32_t qh = 0;
  for (int i = 0; i < 32; ++i) {
    int c = int(rng.below(32));
    if (symmetric && c == 0) c = 16;
    low[i] = c & 15, qh |= uint32_t(c >> 4) << i;
  }
  pack_nibbles(low, qs);
  std::memcpy(qh_bytes, &qh, 4);
}

template <typename Block, typename Fill>
void each_block(uint8_t* out, uint64_t n_bytes, Fill fill) {
  DF_CHECK(n_bytes % sizeof(Block) == 0);
  for (uint64_t b = 0; b < n_bytes; b += sizeof(Block)) {
    Block x;
    fill(x);
    std::memcpy(out + b, &x, sizeof(Block));
  }
}

}  // namespace

// Every type the CPU backend computes: a file synth writes is one the engine runs.
bool supported_type(GgmlType t) { return cpu::dequant_supported(t); }

void fill_random(GgmlType t, float stddev, uint64_t stream, uint8_t* out, uint64_t n_bytes) {
  Rng rng{stream};
  switch (t) {
    case GgmlType::Q4_0: {
      DF_CHECK(n_bytes % 18 == 0);
      for (uint64_t b = 0; b < n_bytes; b += 18) {
        float d = stddev / kQ4CodeStd * jitter(rng);
        uint16_t h = f32_to_f16(d);
        std::memcpy(out + b, &h, 2);
        uint64_t q0 = symmetric_nibbles(rng.next()), q1 = symmetric_nibbles(rng.next());
        std::memcpy(out + b + 2, &q0, 8);
        std::memcpy(out + b + 10, &q1, 8);
      }
      break;
    }
    case GgmlType::Q8_0: {
      DF_CHECK(n_bytes % 34 == 0);
      for (uint64_t b = 0; b < n_bytes; b += 34) {
        float d = stddev / kQ8CodeStd * jitter(rng);
        uint16_t h = f32_to_f16(d);
        std::memcpy(out + b, &h, 2);
        for (int i = 0; i < 32; i += 8) {
          uint64_t w = rng.next();
          for (int k = 0; k < 8; ++k) {
            auto c = static_cast<uint8_t>(w >> (8 * k));
            out[b + 2 + i + k] = c == 0x80 ? 0 : c;
          }
        }
      }
      break;
    }
    case GgmlType::Q4_1:  // value = d * q + m with m = -7.5 d: d * (q - 7.5)
      each_block<cpu::BlockQ4_1>(out, n_bytes, [&](cpu::BlockQ4_1& x) {
        const float d = round_bits(stddev / centered_rms(16) * jitter(rng), 7);
        x.d = f32_to_f16(d), x.m = f32_to_f16(-7.5f * d);
        int c[32];
        for (int& v : c) v = int(rng.below(16));
        pack_nibbles(c, x.qs);
      });
      break;
    case GgmlType::Q5_0:  // codes 1..31 and 16 again for 0: values -15..15
      each_block<cpu::BlockQ5_0>(out, n_bytes, [&](cpu::BlockQ5_0& x) {
        x.d = f32_to_f16(stddev / symmetric_rms(15) * jitter(rng));
        five_bit_codes(rng, true, x.qs, x.qh);
      });
      break;
    case GgmlType::Q5_1:  // value = d * q + m with m = -15.5 d: d * (q - 15.5)
      each_block<cpu::BlockQ5_1>(out, n_bytes, [&](cpu::BlockQ5_1& x) {
        const float d = round_bits(stddev / centered_rms(32) * jitter(rng), 6);
        x.d = f32_to_f16(d), x.m = f32_to_f16(-15.5f * d);
        five_bit_codes(rng, false, x.qs, x.qh);
      });
      break;
    case GgmlType::IQ4_NL:  // the table is not symmetric; scales of either sign make the values so
      each_block<cpu::BlockIQ4_NL>(out, n_bytes, [&](cpu::BlockIQ4_NL& x) {
        const float d = stddev / table_rms() * jitter(rng);
        x.d = f32_to_f16(rng.below(2) ? d : -d);
        int c[32];
        for (int& v : c) v = int(rng.below(16));
        pack_nibbles(c, x.qs);
      });
      break;
    case GgmlType::Q2_K: each_block<cpu::BlockQ2_K>(out, n_bytes, [&](auto& x) { q2_k(rng, stddev, x); }); break;
    case GgmlType::Q3_K: each_block<cpu::BlockQ3_K>(out, n_bytes, [&](auto& x) { q3_k(rng, stddev, x); }); break;
    case GgmlType::Q4_K:
      each_block<cpu::BlockQ4_K>(out, n_bytes, [&](auto& x) { q45_k(rng, stddev, 4, x, nullptr); });
      break;
    case GgmlType::Q5_K:
      each_block<cpu::BlockQ5_K>(out, n_bytes, [&](auto& x) { q45_k(rng, stddev, 5, x, x.qh); });
      break;
    case GgmlType::Q6_K: each_block<cpu::BlockQ6_K>(out, n_bytes, [&](auto& x) { q6_k(rng, stddev, x); }); break;
    case GgmlType::IQ4_XS:
      each_block<cpu::BlockIQ4_XS>(out, n_bytes, [&](auto& x) { iq4_xs(rng, stddev, x); });
      break;
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::F32: {
      const float a = stddev * 1.7320508f;  // uniform on [-a, a] has standard deviation a / sqrt(3)
      size_t width = t == GgmlType::F32 ? 4 : 2;
      DF_CHECK(n_bytes % width == 0);
      for (uint64_t i = 0; i < n_bytes; i += width) {
        float v = (2.0f * rng.uniform() - 1.0f) * a;
        if (t == GgmlType::F32) {
          std::memcpy(out + i, &v, 4);
        } else {
          uint16_t h = t == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
          std::memcpy(out + i, &h, 2);
        }
      }
      break;
    }
    default:
      DF_CHECK_MSG(false, "synth cannot generate this type");
  }
}

}  // namespace df::synth
