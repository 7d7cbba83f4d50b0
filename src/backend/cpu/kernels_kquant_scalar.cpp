// Reference K-quant kernels: Q8_K activations and the dot products of Q2_K .. Q6_K and IQ4_XS weights against
// them, in the lane order every SIMD table reproduces (kernels.h). Element e of a super-block feeds integer lane
// (e % 32) / 4; the integer sums are exact, so only the float steps below fix the result.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels_impl.h"

namespace df::cpu::scalar {

namespace {

inline int lane_of(int e) { return (e % 32) / 4; }

// The 2-bit code of element e in a Q2_K / Q3_K qs array.
inline int low2(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3; }

// The 4-bit code of element e in a Q4_K / Q5_K qs array.
inline int low4(const uint8_t* qs, int e) { return (qs[32 * (e / 64) + e % 32] >> (4 * (e / 32 % 2))) & 0x0f; }

// The 6-bit code (0..63, before the -32 offset) of element e of a Q6_K block.
inline int q6_code(const BlockQ6_K& x, int e) {
  const int n = e / 128, g = e % 128 / 32, l = e % 32;
  const int lo = (x.ql[64 * n + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0x0f;
  const int hi = (x.qh[32 * n + l] >> (2 * g)) & 3;
  return lo | (hi << 4);
}

}  // namespace

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    BlockQ8_K& out = y[b];
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < kQK_K; ++i) {
      const float ax = std::fabs(xb[i]);
      if (ax > amax) {
        amax = ax;
        max = xb[i];
      }
    }
    if (amax == 0.0f) {
      out = BlockQ8_K{};
      continue;
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < kQK_K; ++i)
      out.qs[i] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(iscale * xb[i])));
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += out.qs[16 * j + i];
      out.bsums[j] = static_cast<int16_t>(sum);
    }
    out.d = 1.0f / iscale;
  }
}

float dot_q2_k_q8_k(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a) {
  float l[8] = {};
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * f16_to_f32(x.d);
    const float dmin = -y.d * f16_to_f32(x.dmin);
    for (int k = 0; k < 8; ++k) {
      const int m = (x.scales[2 * k] >> 4) * y.bsums[2 * k] + (x.scales[2 * k + 1] >> 4) * y.bsums[2 * k + 1];
      l[k] = std::fma(dmin, float(m), l[k]);
    }
    int32_t s[8] = {};
    for (int e = 0; e < kQK_K; ++e) s[lane_of(e)] += (x.scales[e / 16] & 0x0f) * low2(x.qs, e) * y.qs[e];
    for (int k = 0; k < 8; ++k) l[k] = std::fma(d, float(s[k]), l[k]);
  }
  return lanes8_sum(l);
}

float dot_q3_k_q8_k(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a) {
  float l[8] = {};
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ3_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * f16_to_f32(x.d);
    int32_t s[8] = {};
    for (int e = 0; e < kQK_K; ++e) {
      const int q = low2(x.qs, e) - ((x.hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4);
      s[lane_of(e)] += q3_k_scale(e / 16, x.scales) * q * y.qs[e];
    }
    for (int k = 0; k < 8; ++k) l[k] = std::fma(d, float(s[k]), l[k]);
  }
  return lanes8_sum(l);
}

float dot_q4_k_q8_k(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a) {
  float l[8] = {}, lm[4] = {};
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * f16_to_f32(x.d);
    const float dmin = -y.d * f16_to_f32(x.dmin);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) kquant_scale_min(j, x.scales, sc[j], mn[j]);
    for (int k = 0; k < 4; ++k) {
      int m = 0;
      for (int j = 2 * k; j < 2 * k + 2; ++j) m += mn[j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
      lm[k] = std::fma(dmin, float(m), lm[k]);
    }
    int32_t s[8] = {};
    for (int e = 0; e < kQK_K; ++e) s[lane_of(e)] += sc[e / 32] * low4(x.qs, e) * y.qs[e];
    for (int k = 0; k < 8; ++k) l[k] = std::fma(d, float(s[k]), l[k]);
  }
  return lanes8_sum(l) + ((lm[0] + lm[2]) + (lm[1] + lm[3]));
}

float dot_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a) {
  float s = 0.0f, sm = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = w[b];
    const BlockQ8_K& y = a[b];
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) kquant_scale_min(j, x.scales, sc[j], mn[j]);
    int32_t isum = 0, msum = 0;
    for (int e = 0; e < kQK_K; ++e) isum += sc[e / 32] * low4(x.qs, e) * y.qs[e];
    for (int j = 0; j < 8; ++j) msum += mn[j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
    s = std::fma(float(isum), f16_to_f32(x.d) * y.d, s);
    sm = std::fma(float(msum), f16_to_f32(x.dmin) * y.d, sm);
  }
  return s - sm;
}

void dot4_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* const a[4], float out[4]) {
  for (int t = 0; t < 4; ++t) {
    float s = 0.0f, sm = 0.0f;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
      const BlockQ4_K& x = w[b];
      const BlockQ8_K& y = a[t][b];
      uint8_t sc[8], mn[8];
      for (int j = 0; j < 8; ++j) kquant_scale_min(j, x.scales, sc[j], mn[j]);
      for (int p = 0; p < 4; ++p) {  // sub-blocks 2p, 2p + 1
        int32_t isum = 0, msum = 0;
        for (int e = 64 * p; e < 64 * p + 64; ++e) isum += sc[e / 32] * low4(x.qs, e) * y.qs[e];
        for (int j = 2 * p; j < 2 * p + 2; ++j) msum += mn[j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
        s = std::fma(float(isum), f16_to_f32(x.d) * y.d, s);
        sm = std::fma(float(msum), f16_to_f32(x.dmin) * y.d, sm);
      }
    }
    out[t] = s - sm;
  }
}

float dot_q5_k_q8_k(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a) {
  float l[8] = {}, sm = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ5_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * f16_to_f32(x.d);
    const float dmin = -y.d * f16_to_f32(x.dmin);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) kquant_scale_min(j, x.scales, sc[j], mn[j]);
    int m = 0;
    for (int j = 0; j < 8; ++j) m += mn[j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
    sm = std::fma(dmin, float(m), sm);
    int32_t s[8] = {};
    for (int e = 0; e < kQK_K; ++e) {
      const int q = low4(x.qs, e) + (((x.qh[e % 32] >> (e / 32)) & 1) << 4);
      s[lane_of(e)] += sc[e / 32] * q * y.qs[e];
    }
    for (int k = 0; k < 8; ++k) l[k] = std::fma(d, float(s[k]), l[k]);
  }
  return lanes8_sum(l) + sm;
}

float dot_q6_k_q8_k(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a) {
  float l[8] = {};
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * f16_to_f32(x.d);
    // The codes enter unsigned; their -32 offset is taken off per lane through the 16-value sums.
    int32_t s[8] = {};
    for (int e = 0; e < kQK_K; ++e) s[lane_of(e)] += x.scales[e / 16] * q6_code(x, e) * y.qs[e];
    for (int k = 0; k < 8; ++k) {
      const int32_t off = 32 * (x.scales[2 * k] * y.bsums[2 * k] + x.scales[2 * k + 1] * y.bsums[2 * k + 1]);
      l[k] = std::fma(d, float(s[k] - off), l[k]);
    }
  }
  return lanes8_sum(l);
}

float dot_iq4_xs_q8_k(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a) {
  float l[8] = {};
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ4_XS& x = w[b];
    const BlockQ8_K& y = a[b];
    int32_t s[8] = {};
    for (int e = 0; e < kQK_K; ++e) {
      const int sub = e / 32, i = e % 32;
      const int code = i < 16 ? x.qs[16 * sub + i] & 0x0f : x.qs[16 * sub + i - 16] >> 4;
      s[lane_of(e)] += iq4_xs_scale(sub, x) * kIQ4NLValues[code] * y.qs[e];
    }
    const float d = f16_to_f32(x.d) * y.d;
    for (int k = 0; k < 8; ++k) l[k] = std::fma(d, float(s[k]), l[k]);
  }
  return lanes8_sum(l);
}

// ---- The CUDA decode order against Q8_0 activations (kernels.h)

namespace {

// A 32-element piece as the GPU decodes it (cuda/kquant.cuh): signed codes, per-half scales and offsets.
struct Piece {
  int q[32];
  float d[2], m[2];
};

Piece piece_of(const BlockQ2_K& x, int j) {
  Piece o;
  const float d = f16_to_f32(x.d), dmin = f16_to_f32(x.dmin);
  for (int h = 0; h < 2; ++h) {
    const int sc = x.scales[2 * j + h];
    o.d[h] = d * float(sc & 0x0f);
    o.m[h] = -(dmin * float(sc >> 4));
  }
  for (int e = 0; e < 32; ++e) o.q[e] = (x.qs[32 * (j / 4) + e] >> (2 * (j % 4))) & 3;
  return o;
}

Piece piece_of(const BlockQ3_K& x, int j) {
  Piece o;
  const float d = f16_to_f32(x.d);
  for (int h = 0; h < 2; ++h) o.d[h] = d * float(q3_k_scale(2 * j + h, x.scales)), o.m[h] = 0.0f;
  for (int e = 0; e < 32; ++e)
    o.q[e] = ((x.qs[32 * (j / 4) + e] >> (2 * (j % 4))) & 3) - (((x.hmask[e] >> j) & 1) ? 0 : 4);
  return o;
}

template <typename B>  // BlockQ4_K, BlockQ5_K
Piece piece_q45(const B& x, const uint8_t* qh, int j) {
  Piece o;
  uint8_t sc, mn;
  kquant_scale_min(j, x.scales, sc, mn);
  o.d[0] = o.d[1] = f16_to_f32(x.d) * float(sc);
  o.m[0] = o.m[1] = -(f16_to_f32(x.dmin) * float(mn));
  for (int e = 0; e < 32; ++e)
    o.q[e] = ((x.qs[32 * (j / 2) + e] >> (4 * (j % 2))) & 0x0f) | (qh ? ((qh[e] >> j) & 1) << 4 : 0);
  return o;
}
Piece piece_of(const BlockQ4_K& x, int j) { return piece_q45(x, nullptr, j); }
Piece piece_of(const BlockQ5_K& x, int j) { return piece_q45(x, x.qh, j); }

Piece piece_of(const BlockQ6_K& x, int j) {
  Piece o;
  const float d = f16_to_f32(x.d);
  for (int h = 0; h < 2; ++h) o.d[h] = d * float(x.scales[2 * j + h]), o.m[h] = 0.0f;
  for (int e = 0; e < 32; ++e) o.q[e] = q6_code(x, 32 * j + e) - 32;
  return o;
}

Piece piece_of(const BlockIQ4_XS& x, int j) {
  Piece o;
  o.d[0] = o.d[1] = f16_to_f32(x.d) * float(iq4_xs_scale(j, x));
  o.m[0] = o.m[1] = 0.0f;
  for (int e = 0; e < 32; ++e) o.q[e] = kIQ4NLValues[(x.qs[16 * j + e % 16] >> (4 * (e / 16))) & 0x0f];
  return o;
}

template <typename B, bool kHalves, bool kOffset>
float dot_pieces_q8_0(int64_t n, const B* w, const BlockQ8_0* a) {
  float lane[32] = {};
  for (int64_t p = 0; p < n / kQK; ++p) {
    const Piece x = piece_of(w[p / 8], int(p % 8));
    const BlockQ8_0& y = a[p];
    int dot[2] = {}, sum[2] = {};
    for (int e = 0; e < 32; ++e) dot[e / 16] += x.q[e] * y.qs[e], sum[e / 16] += y.qs[e];
    float s = kHalves ? std::fma(x.d[1], float(dot[1]), x.d[0] * float(dot[0])) : x.d[0] * float(dot[0] + dot[1]);
    if (kOffset)
      s = kHalves ? std::fma(x.m[1], float(sum[1]), std::fma(x.m[0], float(sum[0]), s))
                  : std::fma(x.m[0], float(sum[0] + sum[1]), s);
    float& l = lane[p % 32];
    l = std::fma(f16_to_f32(y.d), s, l);
  }
  return warp_sum32(lane);
}

}  // namespace

float dot_q2_k_q8_0(int64_t n, const BlockQ2_K* w, const BlockQ8_0* a) {
  return dot_pieces_q8_0<BlockQ2_K, true, true>(n, w, a);
}
float dot_q3_k_q8_0(int64_t n, const BlockQ3_K* w, const BlockQ8_0* a) {
  return dot_pieces_q8_0<BlockQ3_K, true, false>(n, w, a);
}
float dot_q4_k_q8_0(int64_t n, const BlockQ4_K* w, const BlockQ8_0* a) {
  return dot_pieces_q8_0<BlockQ4_K, false, true>(n, w, a);
}
float dot_q5_k_q8_0(int64_t n, const BlockQ5_K* w, const BlockQ8_0* a) {
  return dot_pieces_q8_0<BlockQ5_K, false, true>(n, w, a);
}
float dot_q6_k_q8_0(int64_t n, const BlockQ6_K* w, const BlockQ8_0* a) {
  return dot_pieces_q8_0<BlockQ6_K, true, false>(n, w, a);
}
float dot_iq4_xs_q8_0(int64_t n, const BlockIQ4_XS* w, const BlockQ8_0* a) {
  return dot_pieces_q8_0<BlockIQ4_XS, false, false>(n, w, a);
}

}  // namespace df::cpu::scalar
