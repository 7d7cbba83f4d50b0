// AVX2 + FMA + F16C kernels; the arithmetic order is scalar_kernels()'s (kernels.h), so results are bit-identical.
#include <immintrin.h>

#include <cmath>

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

DF_AVX2 void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
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
    y[b].d = f2h(amax / 127.0f);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    alignas(32) int32_t q[kQK];
    for (int j = 0; j < 4; ++j) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[j], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 8 * j), _mm256_cvtps_epi32(r));
    }
    for (int i = 0; i < kQK; ++i) y[b].qs[i] = static_cast<int8_t>(q[i]);
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

DF_AVX2 void mad_f16(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 r = _mm256_fmadd_ps(load_f16x8(x + i), vv, load_f16x8(y + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = f2h(std::fma(h2f(x[i]), v, h2f(y[i])));
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
      .to_f16 = to_f16,
      .to_bf16 = to_bf16,
      .dot_q4_0_q8_0 = dot_q4_0_q8_0,
      .dot_q8_0_q8_0 = dot_q8_0_q8_0,
      .dot4_q4_0_q8_0 = dot4_q4_0_q8_0,
      .dot4_q8_0_q8_0 = dot4_q8_0_q8_0,
      .dot_f16 = dot_f16,
      .dot_bf16 = dot_bf16,
      .dot_f32 = dot_f32,
      .mad_f16 = mad_f16,
      .scale_f16 = scale_f16,
  };
  return ok ? &k : nullptr;
}

}  // namespace df::cpu
