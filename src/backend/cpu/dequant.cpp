#include "diskformer/backend/cpu/dequant.h"

#include <algorithm>
#include <cstring>

#include "diskformer/backend/cpu/numeric.h"
#include "diskformer/util/check.h"

namespace df::cpu {

using gguf::GgmlType;

namespace {

template <typename Block>
const Block* blocks(const uint8_t* row) {
  return reinterpret_cast<const Block*>(row);
}

// Element i of a 32-block's nibbles: low nibbles first, then high ones.
inline int nibble(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 0x0f : qs[i - 16] >> 4; }

inline int fifth_bit(const uint8_t* qh, int i) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return int((h >> i) & 1);
}

// Q4_K and Q5_K (qh: the fifth bits, nullptr for Q4_K).
template <typename Block>
void q45_k(const Block& x, const uint8_t* qh, float* out) {
  const float d = f16_to_f32(x.d), dmin = f16_to_f32(x.dmin);
  for (int e = 0; e < kQK_K; ++e) {
    uint8_t sc, mn;
    kquant_scale_min(e / 32, x.scales, sc, mn);
    int q = (x.qs[32 * (e / 64) + e % 32] >> (4 * (e / 32 % 2))) & 0x0f;
    if (qh) q += ((qh[e % 32] >> (e / 32)) & 1) << 4;
    const float d1 = d * float(sc), m1 = dmin * float(mn);
    out[e] = d1 * float(q) - m1;
  }
}

}  // namespace

bool dequant_supported(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: return true;
    default: return false;
  }
}

void dequantize_row(GgmlType t, const uint8_t* row, int64_t n, float* out) {
  const int64_t n32 = n / kQK, n256 = n / kQK_K;
  switch (t) {
    case GgmlType::F32: std::copy_n(reinterpret_cast<const float*>(row), n, out); break;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
      break;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
      break;
    case GgmlType::Q4_0:
      for (int64_t b = 0; b < n32; ++b) {
        const BlockQ4_0& x = blocks<BlockQ4_0>(row)[b];
        const float d = f16_to_f32(x.d);
        for (int i = 0; i < kQK; ++i) out[b * kQK + i] = float(nibble(x.qs, i) - 8) * d;
      }
      break;
    case GgmlType::Q4_1:
      for (int64_t b = 0; b < n32; ++b) {
        const BlockQ4_1& x = blocks<BlockQ4_1>(row)[b];
        const float d = f16_to_f32(x.d), m = f16_to_f32(x.m);
        for (int i = 0; i < kQK; ++i) out[b * kQK + i] = float(nibble(x.qs, i)) * d + m;
      }
      break;
    case GgmlType::Q5_0:
      for (int64_t b = 0; b < n32; ++b) {
        const BlockQ5_0& x = blocks<BlockQ5_0>(row)[b];
        const float d = f16_to_f32(x.d);
        for (int i = 0; i < kQK; ++i) out[b * kQK + i] = float((nibble(x.qs, i) | fifth_bit(x.qh, i) << 4) - 16) * d;
      }
      break;
    case GgmlType::Q5_1:
      for (int64_t b = 0; b < n32; ++b) {
        const BlockQ5_1& x = blocks<BlockQ5_1>(row)[b];
        const float d = f16_to_f32(x.d), m = f16_to_f32(x.m);
        for (int i = 0; i < kQK; ++i) out[b * kQK + i] = float(nibble(x.qs, i) | fifth_bit(x.qh, i) << 4) * d + m;
      }
      break;
    case GgmlType::Q8_0:
      for (int64_t b = 0; b < n32; ++b) {
        const BlockQ8_0& x = blocks<BlockQ8_0>(row)[b];
        const float d = f16_to_f32(x.d);
        for (int i = 0; i < kQK; ++i) out[b * kQK + i] = float(x.qs[i]) * d;
      }
      break;
    case GgmlType::IQ4_NL:
      for (int64_t b = 0; b < n32; ++b) {
        const BlockIQ4_NL& x = blocks<BlockIQ4_NL>(row)[b];
        const float d = f16_to_f32(x.d);
        for (int i = 0; i < kQK; ++i) out[b * kQK + i] = d * float(kIQ4NLValues[nibble(x.qs, i)]);
      }
      break;
    case GgmlType::Q2_K:
      for (int64_t b = 0; b < n256; ++b) {
        const BlockQ2_K& x = blocks<BlockQ2_K>(row)[b];
        const float d = f16_to_f32(x.d), dmin = f16_to_f32(x.dmin);
        for (int e = 0; e < kQK_K; ++e) {
          const uint8_t sc = x.scales[e / 16];
          const int q = (x.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
          const float dl = d * float(sc & 0x0f), ml = dmin * float(sc >> 4);
          out[b * kQK_K + e] = dl * float(q) - ml;
        }
      }
      break;
    case GgmlType::Q3_K:
      for (int64_t b = 0; b < n256; ++b) {
        const BlockQ3_K& x = blocks<BlockQ3_K>(row)[b];
        const float d = f16_to_f32(x.d);
        for (int e = 0; e < kQK_K; ++e) {
          const int lo = (x.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
          const int q = lo - ((x.hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4);
          out[b * kQK_K + e] = d * float(q3_k_scale(e / 16, x.scales)) * float(q);
        }
      }
      break;
    case GgmlType::Q4_K:
      for (int64_t b = 0; b < n256; ++b) q45_k(blocks<BlockQ4_K>(row)[b], nullptr, out + b * kQK_K);
      break;
    case GgmlType::Q5_K:
      for (int64_t b = 0; b < n256; ++b) {
        const BlockQ5_K& x = blocks<BlockQ5_K>(row)[b];
        q45_k(x, x.qh, out + b * kQK_K);
      }
      break;
    case GgmlType::Q6_K:
      for (int64_t b = 0; b < n256; ++b) {
        const BlockQ6_K& x = blocks<BlockQ6_K>(row)[b];
        const float d = f16_to_f32(x.d);
        for (int e = 0; e < kQK_K; ++e) {
          const int nn = e / 128, g = e % 128 / 32, l = e % 32;
          const int lo = (x.ql[64 * nn + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0x0f;
          const int hi = (x.qh[32 * nn + l] >> (2 * g)) & 3;
          out[b * kQK_K + e] = d * float(x.scales[e / 16]) * float((lo | hi << 4) - 32);
        }
      }
      break;
    case GgmlType::IQ4_XS:
      for (int64_t b = 0; b < n256; ++b) {
        const BlockIQ4_XS& x = blocks<BlockIQ4_XS>(row)[b];
        const float d = f16_to_f32(x.d);
        for (int sub = 0; sub < 8; ++sub) {
          const float dl = d * float(iq4_xs_scale(sub, x));
          for (int i = 0; i < kQK; ++i)
            out[b * kQK_K + kQK * sub + i] = dl * float(kIQ4NLValues[nibble(x.qs + 16 * sub, i)]);
        }
      }
      break;
    default: DF_CHECK_MSG(false, "dequantize_row: unsupported type");
  }
}

}  // namespace df::cpu
