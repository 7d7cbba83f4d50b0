// AVX2 K-quant kernels: 32 elements per 256-bit step, their products summed to the 8 integer lanes of kernels.h
// (maddubs then madd: element e lands in lane (e % 32) / 4), one float fused multiply-add per lane and super-block.
// The codes are small enough that maddubs never saturates (a pair of products is at most 2 * 127 * 127).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels_impl.h"

#define DF_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace df::cpu::avx2 {

namespace {

DF_AVX2 inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

DF_AVX2 inline __m256i load256(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
DF_AVX2 inline __m128i load128(const void* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

DF_AVX2 inline float sum_lanes(__m256 acc) {
  alignas(32) float l[8];
  _mm256_store_ps(l, acc);
  return lanes8_sum(l);
}

// Unsigned codes u (0..127) times signed activations a, scaled per 16 elements: 8 int32 lanes, elements 0..15 times
// s_lo and 16..31 times s_hi.
DF_AVX2 inline __m256i scaled_lanes(__m256i u, __m256i a, int s_lo, int s_hi) {
  const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(int16_t(s_hi)), _mm_set1_epi16(int16_t(s_lo)));
  return _mm256_madd_epi16(scale, _mm256_maddubs_epi16(u, a));
}

DF_AVX2 inline __m256i nibbles() { return _mm256_set1_epi8(0x0f); }

DF_AVX2 inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

DF_AVX2 void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    BlockQ8_K& out = y[b];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < kQK_K; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (amax == 0.0f) {
      out = BlockQ8_K{};
      continue;
    }
    // The signed value of the first element of largest magnitude sets the scale's sign.
    int first = 0;
    while (first + 1 < kQK_K && std::fabs(xb[first]) != amax) ++first;
    const float iscale = -127.0f / xb[first];
    const __m256 vs = _mm256_set1_ps(iscale), top = _mm256_set1_ps(127.0f);
    for (int i = 0; i < kQK_K; i += 32) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 8 * j), vs),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[j] = _mm256_cvtps_epi32(_mm256_min_ps(r, top));
      }
      const __m256i p16 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      const __m256i bytes = _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qs + i), bytes);
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += out.qs[16 * j + i];
      out.bsums[j] = int16_t(sum);
    }
    out.d = 1.0f / iscale;
  }
}

DF_AVX2 float dot_q2_k_q8_k(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a) {
  const __m256i m3 = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * h2f(x.d), dmin = -y.d * h2f(x.dmin);
    const __m128i raw = load128(x.scales);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f)));
    const __m256i prod = _mm256_madd_epi16(mins, load256(y.bsums));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 2; ++j) {
      const __m256i bits = load256(x.qs + 32 * j);
      for (int g = 0; g < 4; ++g) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * g), m3);
        const int sb = 8 * j + 2 * g;
        sumi = _mm256_add_epi32(sumi, scaled_lanes(q, load256(y.qs + 128 * j + 32 * g), x.scales[sb] & 0x0f,
                                                   x.scales[sb + 1] & 0x0f));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return sum_lanes(acc);
}

DF_AVX2 float dot_q3_k_q8_k(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a) {
  const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4), zero = _mm256_setzero_si256();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ3_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * h2f(x.d);
    int sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = q3_k_scale(j, x.scales);
    const __m256i hbits = load256(x.hmask);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 2; ++j) {
      const __m256i bits = load256(x.qs + 32 * j);
      for (int g = 0; g < 4; ++g) {
        const int t = 4 * j + g;  // the hmask bit of these 32 elements
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * g), m3);
        const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hbits, _mm256_set1_epi8(char(1 << t))), zero);
        const __m256i q8 = load256(y.qs + 128 * j + 32 * g);
        // (lo - 4 * clear) * a, as two unsigned products (exact in 16 bits).
        const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(lo, q8),
                                             _mm256_maddubs_epi16(_mm256_and_si256(clear, four), q8));
        const int sb = 8 * j + 2 * g;
        const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(int16_t(sc[sb + 1])), _mm_set1_epi16(int16_t(sc[sb])));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale, p16));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return sum_lanes(acc);
}

namespace {

// The 8 scales and mins of a Q4_K / Q5_K super-block, and its min term as 4 int32 lanes (lane k: sub-blocks 2k,
// 2k + 1, each min times its 32 activations' sum).
struct ScalesMins {
  uint8_t sc[8], mn[8];
};
DF_AVX2 inline __m128i min_lanes(const ScalesMins& s, const BlockQ8_K& y) {
  const __m128i pair_sums = _mm_hadd_epi16(load128(y.bsums), load128(y.bsums + 8));
  const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.mn)));
  return _mm_madd_epi16(mins, pair_sums);
}
inline ScalesMins scales_mins(const uint8_t* packed) {
  ScalesMins s;
  for (int j = 0; j < 8; ++j) kquant_scale_min(j, packed, s.sc[j], s.mn[j]);
  return s;
}

}  // namespace

DF_AVX2 float dot_q4_k_q8_k(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a) {
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * h2f(x.d), dmin = -y.d * h2f(x.dmin);
    const ScalesMins s = scales_mins(x.scales);
    acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(min_lanes(s, y)), acc_m);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = load256(x.qs + 32 * j);
      const __m256i lo = _mm256_and_si256(bits, nibbles()), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibbles());
      sumi = _mm256_add_epi32(sumi, scaled_lanes(lo, load256(y.qs + 64 * j), s.sc[2 * j], s.sc[2 * j]));
      sumi = _mm256_add_epi32(sumi, scaled_lanes(hi, load256(y.qs + 64 * j + 32), s.sc[2 * j + 1], s.sc[2 * j + 1]));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  alignas(16) float m[4];
  _mm_store_ps(m, acc_m);
  return sum_lanes(acc) + ((m[0] + m[2]) + (m[1] + m[3]));
}

DF_AVX2 float dot_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a) {
  float s = 0.0f, sm = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const ScalesMins scm = scales_mins(x.scales);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = load256(x.qs + 32 * j);
      const __m256i lo = _mm256_and_si256(bits, nibbles()), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibbles());
      sumi = _mm256_add_epi32(sumi, scaled_lanes(lo, load256(y.qs + 64 * j), scm.sc[2 * j], scm.sc[2 * j]));
      sumi = _mm256_add_epi32(sumi, scaled_lanes(hi, load256(y.qs + 64 * j + 32), scm.sc[2 * j + 1], scm.sc[2 * j + 1]));
    }
    alignas(16) int32_t ml[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(ml), min_lanes(scm, y));
    s = std::fma(float(hsum_i32(sumi)), h2f(x.d) * y.d, s);
    sm = std::fma(float((ml[0] + ml[1]) + (ml[2] + ml[3])), h2f(x.dmin) * y.d, sm);
  }
  return s - sm;
}

DF_AVX2 void dot4_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* const a[4], float out[4]) {
  float s[4] = {}, sm[4] = {};
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = w[b];
    const ScalesMins scm = scales_mins(x.scales);
    const float dw = h2f(x.d), mw = h2f(x.dmin);
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = load256(x.qs + 32 * j);
      const __m256i lo = _mm256_and_si256(bits, nibbles()), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibbles());
      for (int t = 0; t < 4; ++t) {
        const BlockQ8_K& y = a[t][b];
        const __m256i sum = _mm256_add_epi32(
            scaled_lanes(lo, load256(y.qs + 64 * j), scm.sc[2 * j], scm.sc[2 * j]),
            scaled_lanes(hi, load256(y.qs + 64 * j + 32), scm.sc[2 * j + 1], scm.sc[2 * j + 1]));
        const int msum = scm.mn[2 * j] * (y.bsums[4 * j] + y.bsums[4 * j + 1]) +
                         scm.mn[2 * j + 1] * (y.bsums[4 * j + 2] + y.bsums[4 * j + 3]);
        s[t] = std::fma(float(hsum_i32(sum)), dw * y.d, s[t]);
        sm[t] = std::fma(float(msum), mw * y.d, sm[t]);
      }
    }
  }
  for (int t = 0; t < 4; ++t) out[t] = s[t] - sm[t];
}

DF_AVX2 float dot_q5_k_q8_k(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a) {
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float sm = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ5_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * h2f(x.d), dmin = -y.d * h2f(x.dmin);
    const ScalesMins s = scales_mins(x.scales);
    alignas(16) int32_t ml[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(ml), min_lanes(s, y));
    sm = std::fma(dmin, float((ml[0] + ml[1]) + (ml[2] + ml[3])), sm);
    const __m256i hbits = load256(x.qh);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = load256(x.qs + 32 * j);
      for (int h = 0; h < 2; ++h) {
        const int t = 2 * j + h;
        const __m256i fifth = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, t), one), 4);
        const __m256i q = _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(bits, 4 * h), nibbles()), fifth);
        sumi = _mm256_add_epi32(sumi, scaled_lanes(q, load256(y.qs + 32 * t), s.sc[t], s.sc[t]));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return sum_lanes(acc) + sm;
}

DF_AVX2 float dot_q6_k_q8_k(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * h2f(x.d);
    const __m256i off = _mm256_slli_epi32(
        _mm256_madd_epi16(load256(y.bsums), _mm256_cvtepi8_epi16(load128(x.scales))), 5);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 2; ++j) {
      const __m256i l0 = load256(x.ql + 64 * j), l1 = load256(x.ql + 64 * j + 32), h = load256(x.qh + 32 * j);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, nibbles()), _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(3)), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, nibbles()), _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(12)), 2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), nibbles()), _mm256_and_si256(h, _mm256_set1_epi8(48))),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), nibbles()),
                          _mm256_srli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(char(0xc0))), 2)),
      };
      for (int g = 0; g < 4; ++g) {
        const int sb = 8 * j + 2 * g;
        sumi = _mm256_add_epi32(sumi, scaled_lanes(q[g], load256(y.qs + 128 * j + 32 * g), x.scales[sb],
                                                   x.scales[sb + 1]));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, off)), acc);
  }
  return sum_lanes(acc);
}

DF_AVX2 float dot_iq4_xs_q8_k(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a) {
  const __m128i table = load128(kIQ4NLValues), m4 = _mm_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ4_XS& x = w[b];
    const BlockQ8_K& y = a[b];
    __m256i sumi = _mm256_setzero_si256();
    for (int sub = 0; sub < 8; ++sub) {
      const __m128i raw = load128(x.qs + 16 * sub);
      const __m256i v = _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(raw, 4), m4)),
                                         _mm_shuffle_epi8(table, _mm_and_si128(raw, m4)));
      const __m256i q8 = load256(y.qs + 32 * sub);
      const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(q8, v));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, _mm256_set1_epi16(int16_t(iq4_xs_scale(sub, x)))));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x.d) * y.d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return sum_lanes(acc);
}

// ---- The CUDA decode order against Q8_0 activations (kernels.h), a super-block (8 pieces, a vector each) at a time:
// the codes against the activation's by maddubs (signed codes through their magnitudes and the activation's signs),
// each half's four lanes added (exact), the pieces' float steps in 8 lanes (lane j: piece j), and lane group b % 4
// of the 32 accumulator lanes taking super-block b.
namespace {

struct PieceScales {  // per piece of a super-block (lane j: piece j), its halves' scales and offsets
  __m256 d0, d1, m0, m1;
};

// Lanes 0..7: the sums of lanes 0..3 of v[0..7] (half 0 of each piece); half: lanes 4..7 (half 1).
DF_AVX2 inline void half_sums(const __m256i (&v)[8], __m256i& half0, __m256i& half1) {
  const __m256i q0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i q1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  half0 = _mm256_permute2x128_si256(q0, q1, 0x20);
  half1 = _mm256_permute2x128_si256(q0, q1, 0x31);
}

// 16 int16 scales (lane k: sub-block k of 16) times d, split into the pieces' halves: even ones (half 0), odd ones
// (half 1).
DF_AVX2 inline void split_halves(__m256i sc16, float d, __m256& even, __m256& odd) {
  even = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(sc16, 16), 16)));
  odd = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_srai_epi32(sc16, 16)));
}

template <bool kHalves, bool kOffset, bool kSigned>
DF_AVX2 inline float pieces_q8_0(int64_t n, const BlockQ8_0* a, auto&& block) {
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ8_0* y = a + 8 * b;
    __m256i c[8], dots[8], sums[8];
    PieceScales ps;
    block(b, c, ps);
    for (int j = 0; j < 8; ++j) {
      const __m256i act = load256(y[j].qs);
      const __m256i p16 = kSigned ? _mm256_maddubs_epi16(_mm256_sign_epi8(c[j], c[j]), _mm256_sign_epi8(act, c[j]))
                                  : _mm256_maddubs_epi16(c[j], act);
      dots[j] = _mm256_madd_epi16(p16, ones16);
      if constexpr (kOffset) sums[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, act), ones16);
    }
    __m256i p0, p1, s0, s1;
    half_sums(dots, p0, p1);
    __m256 s;
    if constexpr (kHalves) {
      s = _mm256_fmadd_ps(ps.d1, _mm256_cvtepi32_ps(p1), _mm256_mul_ps(ps.d0, _mm256_cvtepi32_ps(p0)));
    } else {
      s = _mm256_mul_ps(ps.d0, _mm256_cvtepi32_ps(_mm256_add_epi32(p0, p1)));
    }
    if constexpr (kOffset) {
      half_sums(sums, s0, s1);
      if constexpr (kHalves) {
        s = _mm256_fmadd_ps(ps.m1, _mm256_cvtepi32_ps(s1), _mm256_fmadd_ps(ps.m0, _mm256_cvtepi32_ps(s0), s));
      } else {
        s = _mm256_fmadd_ps(ps.m0, _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), s);
      }
    }
    const __m256 da = _mm256_cvtph_ps(_mm_setr_epi16(short(y[0].d), short(y[1].d), short(y[2].d), short(y[3].d),
                                                     short(y[4].d), short(y[5].d), short(y[6].d), short(y[7].d)));
    acc[b % 4] = _mm256_fmadd_ps(da, s, acc[b % 4]);
  }
  // The butterfly: lanes i and i + 16 (acc[k], acc[k + 2]), then i + 8 (the two vectors), i + 4, i + 2, i + 1.
  const __m256 l8 = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
  const __m128 l4 = _mm_add_ps(_mm256_castps256_ps128(l8), _mm256_extractf128_ps(l8, 1));
  const __m128 l2 = _mm_add_ps(l4, _mm_movehl_ps(l4, l4));
  return _mm_cvtss_f32(_mm_add_ss(l2, _mm_movehdup_ps(l2)));
}

template <typename B>  // BlockQ4_K, BlockQ5_K
DF_AVX2 inline PieceScales q45_scales(const B& x) {
  const ScalesMins sm = scales_mins(x.scales);
  auto eight = [](const uint8_t* v) DF_AVX2 {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v))));
  };
  PieceScales ps;
  ps.d0 = ps.d1 = _mm256_mul_ps(_mm256_set1_ps(h2f(x.d)), eight(sm.sc));
  ps.m0 = ps.m1 = _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(h2f(x.dmin)), eight(sm.mn)), _mm256_set1_ps(-0.0f));
  return ps;
}

// Piece j's 4-bit codes of a Q4_K / Q5_K super-block (low nibbles of qs[32(j / 2) ..] for even j, high for odd).
DF_AVX2 inline __m256i q45_low(const uint8_t* qs, int j) {
  const __m256i q = load256(qs + 32 * (j / 2));
  return _mm256_and_si256(j % 2 ? _mm256_srli_epi16(q, 4) : q, nibbles());
}

}  // namespace

DF_AVX2 float dot_q4_k_q8_0(int64_t n, const BlockQ4_K* w, const BlockQ8_0* a) {
  return pieces_q8_0<false, true, false>(n, a, [&](int64_t b, __m256i(&c)[8], PieceScales& ps) DF_AVX2 {
    for (int j = 0; j < 8; ++j) c[j] = q45_low(w[b].qs, j);
    ps = q45_scales(w[b]);
  });
}

DF_AVX2 float dot_q5_k_q8_0(int64_t n, const BlockQ5_K* w, const BlockQ8_0* a) {
  return pieces_q8_0<false, true, false>(n, a, [&](int64_t b, __m256i(&c)[8], PieceScales& ps) DF_AVX2 {
    const __m256i h = load256(w[b].qh);
    for (int j = 0; j < 8; ++j)
      c[j] = _mm256_or_si256(q45_low(w[b].qs, j),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, j), _mm256_set1_epi8(1)), 4));
    ps = q45_scales(w[b]);
  });
}

DF_AVX2 float dot_q6_k_q8_0(int64_t n, const BlockQ6_K* w, const BlockQ8_0* a) {
  return pieces_q8_0<true, false, true>(n, a, [&](int64_t b, __m256i(&c)[8], PieceScales& ps) DF_AVX2 {
    const BlockQ6_K& x = w[b];
    for (int j = 0; j < 8; ++j) {
      const int g = j % 4;
      const __m256i l = load256(x.ql + 64 * (j / 4) + 32 * (g % 2)), h = load256(x.qh + 32 * (j / 4));
      const __m256i lo = _mm256_and_si256(g / 2 ? _mm256_srli_epi16(l, 4) : l, nibbles());
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(h, 2 * g), _mm256_set1_epi8(3));
      c[j] = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
    }
    split_halves(_mm256_cvtepi8_epi16(load128(x.scales)), h2f(x.d), ps.d0, ps.d1);
  });
}

DF_AVX2 float dot_q3_k_q8_0(int64_t n, const BlockQ3_K* w, const BlockQ8_0* a) {
  return pieces_q8_0<true, false, true>(n, a, [&](int64_t b, __m256i(&c)[8], PieceScales& ps) DF_AVX2 {
    const BlockQ3_K& x = w[b];
    const __m256i h = load256(x.hmask);
    for (int j = 0; j < 8; ++j) {
      const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(load256(x.qs + 32 * (j / 4)), 2 * (j % 4)),
                                          _mm256_set1_epi8(3));
      const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(h, j), _mm256_set1_epi8(1));
      c[j] = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 2)), _mm256_set1_epi8(4));
    }
    alignas(32) int16_t sc[16];
    for (int k = 0; k < 16; ++k) sc[k] = int16_t(q3_k_scale(k, x.scales));
    split_halves(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc)), h2f(x.d), ps.d0, ps.d1);
  });
}

DF_AVX2 float dot_q2_k_q8_0(int64_t n, const BlockQ2_K* w, const BlockQ8_0* a) {
  return pieces_q8_0<true, true, false>(n, a, [&](int64_t b, __m256i(&c)[8], PieceScales& ps) DF_AVX2 {
    const BlockQ2_K& x = w[b];
    for (int j = 0; j < 8; ++j)
      c[j] = _mm256_and_si256(_mm256_srli_epi16(load256(x.qs + 32 * (j / 4)), 2 * (j % 4)), _mm256_set1_epi8(3));
    const __m256i raw = _mm256_cvtepu8_epi16(load128(x.scales));
    split_halves(_mm256_and_si256(raw, _mm256_set1_epi16(0x0f)), h2f(x.d), ps.d0, ps.d1);
    split_halves(_mm256_srli_epi16(raw, 4), h2f(x.dmin), ps.m0, ps.m1);
    const __m256 neg = _mm256_set1_ps(-0.0f);
    ps.m0 = _mm256_xor_ps(ps.m0, neg), ps.m1 = _mm256_xor_ps(ps.m1, neg);
  });
}

DF_AVX2 float dot_iq4_xs_q8_0(int64_t n, const BlockIQ4_XS* w, const BlockQ8_0* a) {
  const __m256i table = _mm256_broadcastsi128_si256(load128(kIQ4NLValues));
  return pieces_q8_0<false, false, true>(n, a, [&](int64_t b, __m256i(&c)[8], PieceScales& ps) DF_AVX2 {
    const BlockIQ4_XS& x = w[b];
    for (int j = 0; j < 8; ++j) {
      const __m128i r = load128(x.qs + 16 * j);  // low nibbles: elements 0..15, high: 16..31
      const __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(r, 4), r), nibbles());
      c[j] = _mm256_shuffle_epi8(table, codes);
    }
    alignas(32) int32_t sc[8];
    for (int j = 0; j < 8; ++j) sc[j] = iq4_xs_scale(j, x);
    const __m256 scales = _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc)));
    ps.d0 = ps.d1 = _mm256_mul_ps(_mm256_set1_ps(h2f(x.d)), scales);
  });
}

}  // namespace df::cpu::avx2
