// AVX2 + FMA + F16C kernels; the arithmetic order is scalar_kernels()'s (kernels.h), so results are bit-identical.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/exp_approx.h"
#include "backend/cpu/kernels_impl.h"
#include "diskformer/backend/cpu/kernels.h"

#define DF_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace df::cpu {

namespace {

// F16C conversions (the portable ones in numeric.h compile to library calls).
DF_AVX2 inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
DF_AVX2 inline uint16_t f2h(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

// Products of two signed byte vectors summed in pairs then quads: 8 int32 lanes (exact).
DF_AVX2 inline __m256i dot_i8(__m256i x, __m256i y) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

DF_AVX2 inline __m256i unpack_q4_0(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}

// One 32-block of activations to codes (their sum in *sum where asked); returns the unrounded scale amax / 127.
DF_AVX2 inline float quantize_block(const float* xb, int8_t* qs, int* sum = nullptr) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_loadu_ps(xb + 8 * j);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[j]));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  alignas(32) int32_t q[kQK];
  for (int j = 0; j < 4; ++j) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[j], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + 8 * j), _mm256_cvtps_epi32(r));
  }
  int s = 0;
  for (int i = 0; i < kQK; ++i) {
    qs[i] = static_cast<int8_t>(q[i]);
    s += q[i];
  }
  if (sum) *sum = s;
  return amax / 127.0f;
}

DF_AVX2 void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) y[b].d = f2h(quantize_block(x + b * kQK, y[b].qs));
}

DF_AVX2 void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    int sum;
    const float d = quantize_block(x + b * kQK, y[b].qs, &sum);
    y[b].d = f2h(d);
    y[b].s = f2h(d * float(sum));
  }
}

DF_AVX2 void to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = f2h(x[i]);
}

void to_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

DF_AVX2 inline float hsum_lanes8(__m256 acc) {
  alignas(32) float l[8];
  _mm256_store_ps(l, acc);
  return lanes8_sum(l);
}

DF_AVX2 float dot_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256 d = _mm256_set1_ps(h2f(w[b].d) * h2f(a[b].d));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(unpack_q4_0(w[b].qs), q)), acc);
  }
  return hsum_lanes8(acc);
}

DF_AVX2 float dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* a) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256 d = _mm256_set1_ps(h2f(w[b].d) * h2f(a[b].d));
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(x, q)), acc);
  }
  return hsum_lanes8(acc);
}

// 32 bytes of 0x00 / 0xff from the 32 bits of qh (little-endian): byte i is set where bit i is.
DF_AVX2 inline __m256i bytes_from_bits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(h)), _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

DF_AVX2 inline __m256i nibbles_q4(const uint8_t* qs) {  // elements 0..31 as unsigned 0..15
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
}

// Unsigned codes times signed activations: 8 int32 lanes (exact: codes below 128).
DF_AVX2 inline __m256i dot_u8(__m256i u, __m256i a) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
}

DF_AVX2 float dot_q4_1_q8_1(int64_t n, const BlockQ4_1* w, const BlockQ8_1* a) {
  __m256 acc = _mm256_setzero_ps();
  float sm = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    sm = std::fma(h2f(w[b].m), h2f(a[b].s), sm);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[b].d) * h2f(a[b].d)),
                          _mm256_cvtepi32_ps(dot_u8(nibbles_q4(w[b].qs), q)), acc);
  }
  return hsum_lanes8(acc) + sm;
}

DF_AVX2 float dot_q5_0_q8_0(int64_t n, const BlockQ5_0* w, const BlockQ8_0* a) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    // code - 16 as a signed byte: the nibble with 0xf0 where the fifth bit is clear.
    const __m256i x = _mm256_or_si256(nibbles_q4(w[b].qs),
                                      _mm256_andnot_si256(bytes_from_bits(w[b].qh), _mm256_set1_epi8(char(0xf0))));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[b].d) * h2f(a[b].d)), _mm256_cvtepi32_ps(dot_i8(x, q)), acc);
  }
  return hsum_lanes8(acc);
}

DF_AVX2 float dot_q5_1_q8_1(int64_t n, const BlockQ5_1* w, const BlockQ8_1* a) {
  __m256 acc = _mm256_setzero_ps();
  float sm = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    sm = std::fma(h2f(w[b].m), h2f(a[b].s), sm);
    const __m256i x = _mm256_or_si256(nibbles_q4(w[b].qs),
                                      _mm256_and_si256(bytes_from_bits(w[b].qh), _mm256_set1_epi8(0x10)));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[b].d) * h2f(a[b].d)), _mm256_cvtepi32_ps(dot_u8(x, q)), acc);
  }
  return hsum_lanes8(acc) + sm;
}

DF_AVX2 inline __m256i values_iq4_nl(const uint8_t* qs) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
  return _mm256_shuffle_epi8(table, nibbles_q4(qs));
}

DF_AVX2 float dot_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a) {
  const int64_t nb = n / kQK;
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
    const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b + 1].qs));
    even = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[b].d) * h2f(w[b].d)),
                           _mm256_cvtepi32_ps(dot_i8(values_iq4_nl(w[b].qs), q0)), even);
    odd = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[b + 1].d) * h2f(w[b + 1].d)),
                          _mm256_cvtepi32_ps(dot_i8(values_iq4_nl(w[b + 1].qs), q1)), odd);
  }
  float sum = hsum_lanes8(_mm256_add_ps(even, odd));
  if (b < nb) {
    alignas(32) int32_t l[8];
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
    _mm256_store_si256(reinterpret_cast<__m256i*>(l), dot_i8(values_iq4_nl(w[b].qs), q));
    const int32_t isum = l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
    sum = std::fma(h2f(a[b].d) * h2f(w[b].d), float(isum), sum);
  }
  return sum;
}

DF_AVX2 float dot_iq4_nl_q8_0_batch(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[b].d) * h2f(a[b].d)),
                          _mm256_cvtepi32_ps(dot_i8(values_iq4_nl(w[b].qs), q)), acc);
  }
  return hsum_lanes8(acc);
}

DF_AVX2 inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// The exact sums of 8 consecutive blocks, one per lane: 8 lane vectors reduced together (integer adds, so any order
// gives the same sums), which keeps the horizontal work off each block.
DF_AVX2 inline __m256i block_sums8(const __m256i v[8]) {
  const __m256i h0123 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i h4567 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20), _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

// Block b's signed weight bytes: Q4_0 codes less 8, or IQ4_NL table values.
DF_AVX2 inline __m256i weight_bytes(const BlockQ4_0& x) { return unpack_q4_0(x.qs); }
DF_AVX2 inline __m256i weight_bytes(const BlockIQ4_NL& x) { return values_iq4_nl(x.qs); }

// s = fma(float(isum_b), d_w * d_a, s) block by block (kernels.h's interleaved order).
template <typename Block>
DF_AVX2 inline float x8_sum(int64_t n, const Block* w, const BlockQ8_0* a) {
  const int64_t nb = n / kQK;
  float s = 0.0f;
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    __m256i v[8];
    for (int j = 0; j < 8; ++j)
      v[j] = dot_i8(weight_bytes(w[b + j]), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b + j].qs)));
    alignas(32) float isum[8];
    _mm256_store_ps(isum, _mm256_cvtepi32_ps(block_sums8(v)));
    for (int j = 0; j < 8; ++j) s = std::fma(isum[j], h2f(w[b + j].d) * h2f(a[b + j].d), s);
  }
  for (; b < nb; ++b) {
    const __m256i v = dot_i8(weight_bytes(w[b]), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs)));
    s = std::fma(float(hsum_i32(v)), h2f(w[b].d) * h2f(a[b].d), s);
  }
  return s;
}

DF_AVX2 float dot_q4_0_q8_0_x8(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a) { return x8_sum(n, w, a); }

// The eight rows' scales of block b as floats, lane i for row i.
DF_AVX2 inline __m256 row_scales8(const BlockQ4_0* const w[8], int64_t b) {
  alignas(16) uint16_t d[8];
  for (int i = 0; i < 8; ++i) d[i] = w[i][b].d;
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d)));
}

template <int NT>
DF_AVX2 inline void dot8_x8(int64_t n, const BlockQ4_0* const w[8], const BlockQ8_0* const a[], float* out) {
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    prefetch_next_rows8<_MM_HINT_T0>(w, b);
    __m256i x[8];
    for (int i = 0; i < 8; ++i) x[i] = unpack_q4_0(w[i][b].qs);
    const __m256 dw = row_scales8(w, b);
    for (int t = 0; t < NT; ++t) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t][b].qs));
      __m256i v[8];
      for (int i = 0; i < 8; ++i) v[i] = dot_i8(x[i], q);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_sums8(v)), _mm256_mul_ps(dw, _mm256_set1_ps(h2f(a[t][b].d))),
                               acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + 8 * t, acc[t]);
}

DF_AVX2 void dot8_q4_0_q8_0_x8(int64_t n, const BlockQ4_0* const w[8], const BlockQ8_0* const a[], int nt, float* out) {
  // Sixteen ymm registers hold eight unpacked rows and four accumulators at most: eight activation rows go as two
  // groups of four.
  if (nt > 4) {
    dot8_x8<4>(n, w, a, out);
    return dot8_q4_0_q8_0_x8(n, w, a + 4, nt - 4, out + 32);
  }
  switch (nt) {
    case 1: return dot8_x8<1>(n, w, a, out);
    case 2: return dot8_x8<2>(n, w, a, out);
    case 3: return dot8_x8<3>(n, w, a, out);
    default: return dot8_x8<4>(n, w, a, out);
  }
}

DF_AVX2 float dot_iq4_nl_q8_0_x8(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a) { return x8_sum(n, w, a); }

DF_AVX2 void dot4_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* const a[4], float out[4]) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i x = unpack_q4_0(w[b].qs);
    const float dw = h2f(w[b].d);
    for (int t = 0; t < 4; ++t) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t][b].qs));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(a[t][b].d)), _mm256_cvtepi32_ps(dot_i8(x, q)), acc[t]);
    }
  }
  for (int t = 0; t < 4; ++t) out[t] = hsum_lanes8(acc[t]);
}

DF_AVX2 void dot4_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* const a[4], float out[4]) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const float dw = h2f(w[b].d);
    for (int t = 0; t < 4; ++t) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t][b].qs));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(a[t][b].d)), _mm256_cvtepi32_ps(dot_i8(x, q)), acc[t]);
    }
  }
  for (int t = 0; t < 4; ++t) out[t] = hsum_lanes8(acc[t]);
}

DF_AVX2 inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
DF_AVX2 inline __m256 load_bf16x8(const uint16_t* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

// 8-lane fused multiply-add loops with the scalar tail folded into the same lanes (kernels.h).
#define DF_LANES8_DOT(LOAD8, LOAD1)                                  \
  __m256 acc = _mm256_setzero_ps();                                  \
  int64_t i = 0;                                                     \
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(LOAD8(w + i), LOAD8(a + i), acc); \
  alignas(32) float l[8];                                            \
  _mm256_store_ps(l, acc);                                           \
  for (; i < n; ++i) l[i % 8] = std::fma(LOAD1(w[i]), LOAD1(a[i]), l[i % 8]); \
  return lanes8_sum(l)

inline float id_f32(float x) { return x; }

DF_AVX2 float dot_f16(int64_t n, const uint16_t* w, const uint16_t* a) { DF_LANES8_DOT(load_f16x8, f16_to_f32); }
DF_AVX2 float dot_bf16(int64_t n, const uint16_t* w, const uint16_t* a) { DF_LANES8_DOT(load_bf16x8, bf16_to_f32); }
DF_AVX2 float dot_f32(int64_t n, const float* w, const float* a) { DF_LANES8_DOT(_mm256_loadu_ps, id_f32); }

// The whole 32-element steps of dot_f32_single's order (kernels.h), vectors loaded by LOAD8.
#define DF_SINGLE_STEPS(LOAD8)                                                                    \
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}; \
  const int64_t whole = n / 32 * 32;                                                              \
  for (int64_t i = 0; i < whole; i += 32)                                                         \
    for (int j = 0; j < 4; ++j)                                                                   \
      acc[j] = _mm256_fmadd_ps(LOAD8(w + i + 8 * j), LOAD8(a + i + 8 * j), acc[j]);               \
  alignas(32) float l[8];                                                                         \
  _mm256_store_ps(l, _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3])))

inline float single_lanes_sum(const float* l) { return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7])); }

DF_AVX2 float dot_f32_single(int64_t n, const float* w, const float* a) {
  DF_SINGLE_STEPS(_mm256_loadu_ps);
  float sum = single_lanes_sum(l);
  for (int64_t i = whole; i < n; ++i) sum += w[i] * a[i];
  return sum;
}

DF_AVX2 float dot_f16_single(int64_t n, const uint16_t* w, const uint16_t* a) {
  DF_SINGLE_STEPS(load_f16x8);
  double sum = single_lanes_sum(l);
  for (int64_t i = whole; i < n; ++i) sum += double(h2f(w[i]) * h2f(a[i]));
  return float(sum);
}

DF_AVX2 float dot_bf16_single(int64_t n, const uint16_t* w, const uint16_t* a) {
  DF_SINGLE_STEPS(load_bf16x8);
  double sum = lanes8_sum(l);
  for (int64_t i = whole; i < n; ++i) sum += double(bf16_to_f32(w[i]) * bf16_to_f32(a[i]));
  return float(sum);
}

// exp_approx_f32 on 8 lanes, step for step.
DF_AVX2 inline __m256 exp_approx8(__m256 x) {
  using namespace exp_approx;
  const __m256 shift = _mm256_set1_ps(kShift);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(kInvLn2), shift);
  const __m256 n = _mm256_sub_ps(z, shift);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(kP4), b, _mm256_set1_ps(kP3)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(kP2), b, _mm256_set1_ps(kP1))),
      u, _mm256_mul_ps(_mm256_set1_ps(kP0), b));
  const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256 big = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
  const __m256 normal = _mm256_fmadd_ps(j, k, k);
  if (!_mm256_movemask_ps(big)) return normal;
  const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                     _mm256_set1_epi32(int(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256 huge = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
  return _mm256_blendv_ps(_mm256_blendv_ps(normal, scaled, big), _mm256_mul_ps(s1, s1), huge);
}

DF_AVX2 void swiglu(int64_t n, const float* gate, const float* up, float* y) {
  const int64_t whole = n / 8 * 8;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < whole; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, exp_approx8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (int64_t i = whole; i < n; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

DF_AVX2 void silu(int64_t n, const float* x, float* y) {
  const int64_t whole = n / 8 * 8;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < whole; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, exp_approx8(_mm256_sub_ps(_mm256_setzero_ps(), v)))));
  }
  for (int64_t i = whole; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

DF_AVX2 void mad_f32(int64_t n, float* y, const float* x, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), vv, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(x[i], v, y[i]);
}

DF_AVX2 void merge_f32(int64_t n, float* y, float sy, const float* x, float sx) {
  const __m256 vy = _mm256_set1_ps(sy), vx = _mm256_set1_ps(sx);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(y + i), vy, _mm256_mul_ps(_mm256_loadu_ps(x + i), vx)));
  for (; i < n; ++i) y[i] = std::fma(y[i], sy, x[i] * sx);
}

// Eight keys side by side, lane i holding key i's chain over d (an 8x8 block of halves transposed per step).
DF_AVX2 void tile_scores_f16(int64_t n, int64_t dim, const uint16_t* k, int64_t stride, const float* q, float* out) {
  int64_t j = 0;
  if (dim % 8 == 0)
    for (; j + 8 <= n; j += 8) {
      __m256 s = _mm256_setzero_ps();
      for (int64_t d = 0; d < dim; d += 8) {
        __m128i r[8];
        for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(k + (j + i) * stride + d));
        // Transpose 8 rows of 8 halves: t[c] holds element d + c of the 8 keys.
        const __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
        const __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
        const __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
        const __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
        const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
        const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
        const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
        const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
        const __m128i t[8] = {_mm_unpacklo_epi64(b0, b4), _mm_unpackhi_epi64(b0, b4), _mm_unpacklo_epi64(b1, b5),
                              _mm_unpackhi_epi64(b1, b5), _mm_unpacklo_epi64(b2, b6), _mm_unpackhi_epi64(b2, b6),
                              _mm_unpacklo_epi64(b3, b7), _mm_unpackhi_epi64(b3, b7)};
        for (int c = 0; c < 8; ++c) s = _mm256_fmadd_ps(_mm256_cvtph_ps(t[c]), _mm256_set1_ps(q[d + c]), s);
      }
      _mm256_storeu_ps(out + j, s);
    }
  for (; j < n; ++j) {
    float s = 0.0f;
    for (int64_t d = 0; d < dim; ++d) s = std::fma(h2f(k[j * stride + d]), q[d], s);
    out[j] = s;
  }
}

// Lane i holds element d + i's chain over the keys.
DF_AVX2 void tile_accumulate_f16(int64_t n, int64_t dim, const uint16_t* v, int64_t stride, const float* p, float* acc) {
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    for (int64_t j = 0; j < n; ++j)
      a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]),
                          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + j * stride + d))), a);
    _mm256_storeu_ps(acc + d, a);
  }
  for (; d < dim; ++d)
    for (int64_t j = 0; j < n; ++j) acc[d] = std::fma(p[j], h2f(v[j * stride + d]), acc[d]);
}

DF_AVX2 void mad_f16(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 r = _mm256_fmadd_ps(load_f16x8(x + i), vv, load_f16x8(y + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = f2h(std::fma(h2f(x[i]), v, h2f(y[i])));
}

DF_AVX2 void exp_shifted(int64_t n, const float* x, float m, float* y) {
  const __m256 mm = _mm256_set1_ps(m);
  for (int64_t i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, exp_approx8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mm)));
}

DF_AVX2 void rope_rotate(int n_heads, int head_dim, int n_rot, bool neox, const float* cs, const float* sn,
                         float* x) {
  rope_rotate_pairs(n_heads, head_dim, n_rot, neox, cs, sn, x);
}

DF_AVX2 void scale_f16(int64_t n, uint16_t* y, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 r = _mm256_mul_ps(load_f16x8(y + i), vv);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = f2h(h2f(y[i]) * v);
}

}  // namespace

const Kernels* avx2_kernels() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  static const Kernels k{
      .name = "avx2",
      .quantize_q8_0 = quantize_q8_0,
      .quantize_q8_1 = quantize_q8_1,
      .quantize_q8_k = avx2::quantize_q8_k,
      .to_f16 = to_f16,
      .to_bf16 = to_bf16,
      .dot_q4_0_q8_0 = dot_q4_0_q8_0,
      .dot_q8_0_q8_0 = dot_q8_0_q8_0,
      .dot_q4_1_q8_1 = dot_q4_1_q8_1,
      .dot_q5_0_q8_0 = dot_q5_0_q8_0,
      .dot_q5_1_q8_1 = dot_q5_1_q8_1,
      .dot_iq4_nl_q8_0 = dot_iq4_nl_q8_0,
      .dot_iq4_nl_q8_0_batch = dot_iq4_nl_q8_0_batch,
      .dot_q2_k_q8_k = avx2::dot_q2_k_q8_k,
      .dot_q3_k_q8_k = avx2::dot_q3_k_q8_k,
      .dot_q4_k_q8_k = avx2::dot_q4_k_q8_k,
      .dot_q5_k_q8_k = avx2::dot_q5_k_q8_k,
      .dot_q6_k_q8_k = avx2::dot_q6_k_q8_k,
      .dot_iq4_xs_q8_k = avx2::dot_iq4_xs_q8_k,
      .dot4_q4_0_q8_0 = dot4_q4_0_q8_0,
      .dot4_q8_0_q8_0 = dot4_q8_0_q8_0,
      .dot_f16 = dot_f16,
      .dot_bf16 = dot_bf16,
      .dot_f32 = dot_f32,
      .dot_f32_single = dot_f32_single,
      .dot_f16_single = dot_f16_single,
      .dot_f16_single_keys = keys_one_by_one<dot_f16_single>,
      .dot_bf16_single = dot_bf16_single,
      .dot_q4_0_q8_0_x8 = dot_q4_0_q8_0_x8,
      .dot8_q4_0_q8_0_x8 = dot8_q4_0_q8_0_x8,
      .dot_iq4_nl_q8_0_x8 = dot_iq4_nl_q8_0_x8,
      .dot_q4_k_q8_k_x8 = avx2::dot_q4_k_q8_k_x8,
      .dot4_q4_k_q8_k_x8 = avx2::dot4_q4_k_q8_k_x8,
      .dot8_q4_k_q8_k_x8 =
          rows8_q4_k<avx2::dot4_q4_k_q8_k_x8, acts_one_by_one<BlockQ4_K, BlockQ8_K, avx2::dot_q4_k_q8_k_x8>>,
      .dotn_q2_k_q8_k = acts_one_by_one<BlockQ2_K, BlockQ8_K, avx2::dot_q2_k_q8_k>,
      .dotn_q3_k_q8_k = acts_one_by_one<BlockQ3_K, BlockQ8_K, avx2::dot_q3_k_q8_k>,
      .dotn_q5_k_q8_k = acts_one_by_one<BlockQ5_K, BlockQ8_K, avx2::dot_q5_k_q8_k>,
      .dotn_iq4_xs_q8_k = acts_one_by_one<BlockIQ4_XS, BlockQ8_K, avx2::dot_iq4_xs_q8_k>,
      .dotn_q6_k_q8_k = acts_one_by_one<BlockQ6_K, BlockQ8_K, avx2::dot_q6_k_q8_k>,
      .dot_q2_k_q8_0 = avx2::dot_q2_k_q8_0,
      .dot_q3_k_q8_0 = avx2::dot_q3_k_q8_0,
      .dot_q4_k_q8_0 = avx2::dot_q4_k_q8_0,
      .dot_q5_k_q8_0 = avx2::dot_q5_k_q8_0,
      .dot_q6_k_q8_0 = avx2::dot_q6_k_q8_0,
      .dot_iq4_xs_q8_0 = avx2::dot_iq4_xs_q8_0,
      .swiglu = swiglu,
      .silu = silu,
      .exp_shifted = exp_shifted,
      .mad_f32 = mad_f32,
      .merge_f32 = merge_f32,
      .tile_scores_f16 = tile_scores_f16,
      .tile_accumulate_f16 = tile_accumulate_f16,
      .rope_rotate = rope_rotate,
      .mad_f16 = mad_f16,
      .scale_f16 = scale_f16,
  };
  return ok ? &k : nullptr;
}

}  // namespace df::cpu
