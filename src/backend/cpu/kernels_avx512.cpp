// AVX-512 VNNI versions of the quantized dot products (two blocks per 512-bit step, integer lanes from vpdpbusd; the
// K-quants in kernels_kquant_avx512.cpp); every other kernel is the AVX2 table's. The float accumulation stays 8 lanes, block after block (kernels.h), so
// results are bit-identical to scalar_kernels().
#include <immintrin.h>

#include <cmath>

#include "backend/cpu/kernels_impl.h"
#include "diskformer/backend/cpu/kernels.h"




#define DF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace df::cpu {

namespace {

// F16C conversions (the portable ones in numeric.h compile to library calls).
DF_AVX512 inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
DF_AVX512 inline uint16_t f2h(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
DF_AVX512 inline __m512 load_f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

DF_AVX512 inline __m256i nibbles_q4_0(const uint8_t* qs) {  // elements 0..31 as unsigned 0..15
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
}

DF_AVX512 inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

DF_AVX512 inline float sum_lanes(__m256 acc) {
  alignas(32) float l[8];
  _mm256_store_ps(l, acc);
  return lanes8_sum(l);
}

// Lane j of block b: sum over elements 4j..4j+3 of (u - bias) * a, as u * a - bias * a with u unsigned.
DF_AVX512 inline __m512i lanes_u8(__m512i u, __m512i a, __m512i bias) {
  const __m512i z = _mm512_setzero_si512();
  return _mm512_sub_epi32(_mm512_dpbusd_epi32(z, u, a), _mm512_dpbusd_epi32(z, bias, a));
}
DF_AVX512 inline __m256i lanes_u8(__m256i u, __m256i a, __m256i bias) {
  const __m256i z = _mm256_setzero_si256();
  return _mm256_sub_epi32(_mm256_dpbusd_epi32(z, u, a), _mm256_dpbusd_epi32(z, bias, a));
}

DF_AVX512 float dot_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a) {
  const int64_t nb = n / kQK;
  const __m512i bias = _mm512_set1_epi8(8);
  __m256 acc = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(nibbles_q4_0(w[b].qs)), nibbles_q4_0(w[b + 1].qs), 1);
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(load32(a[b].qs)), load32(a[b + 1].qs), 1);
    const __m512 p = _mm512_cvtepi32_ps(lanes_u8(u, q, bias));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[b].d) * h2f(a[b].d)), _mm512_castps512_ps256(p), acc);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[b + 1].d) * h2f(a[b + 1].d)),
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(p), 1)), acc);
  }
  for (; b < nb; ++b) {
    const __m256 p = _mm256_cvtepi32_ps(lanes_u8(nibbles_q4_0(w[b].qs), load32(a[b].qs), _mm256_set1_epi8(8)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[b].d) * h2f(a[b].d)), p, acc);
  }
  return sum_lanes(acc);
}

DF_AVX512 float dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* a) {
  // Signed weights as unsigned: (w + 128) * a - 128 * a.
  const int64_t nb = n / kQK;
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  __m256 acc = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(load32(w[b].qs)), load32(w[b + 1].qs), 1);
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(load32(a[b].qs)), load32(a[b + 1].qs), 1);
    const __m512 p = _mm512_cvtepi32_ps(lanes_u8(_mm512_xor_si512(x, flip), q, flip));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[b].d) * h2f(a[b].d)), _mm512_castps512_ps256(p), acc);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[b + 1].d) * h2f(a[b + 1].d)),
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(p), 1)), acc);
  }
  for (; b < nb; ++b) {
    const __m256i f = _mm256_set1_epi8(char(0x80));
    const __m256 p = _mm256_cvtepi32_ps(lanes_u8(_mm256_xor_si256(load32(w[b].qs), f), load32(a[b].qs), f));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[b].d) * h2f(a[b].d)), p, acc);
  }
  return sum_lanes(acc);
}

DF_AVX512 void dot4_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* const a[4], float out[4]) {
  const __m256i bias = _mm256_set1_epi8(8);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i u = nibbles_q4_0(w[b].qs);
    const float dw = h2f(w[b].d);
    for (int t = 0; t < 4; ++t) {
      const __m256 p = _mm256_cvtepi32_ps(lanes_u8(u, load32(a[t][b].qs), bias));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(a[t][b].d)), p, acc[t]);
    }
  }
  for (int t = 0; t < 4; ++t) out[t] = sum_lanes(acc[t]);
}

DF_AVX512 inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// The exact sums of 8 consecutive blocks, one per lane (integer adds: any order gives the same sums).
DF_AVX512 inline __m256i block_sums8(const __m256i v[8]) {
  const __m256i h0123 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i h4567 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20), _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

// The interleaved-matrix order: one exact sum per block, s = fma(float(isum), d_w * d_a, s) block by block
// (kernels.h); two blocks per vpdpbusd, the sums of 8 blocks reduced together.
DF_AVX512 float dot_q4_0_q8_0_x8(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a) {
  const int64_t nb = n / kQK;
  const __m512i bias = _mm512_set1_epi8(8);
  float s = 0.0f;
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    __m256i v[8];
    for (int j = 0; j < 8; j += 2) {
      const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(nibbles_q4_0(w[b + j].qs)), nibbles_q4_0(w[b + j + 1].qs), 1);
      const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(load32(a[b + j].qs)), load32(a[b + j + 1].qs), 1);
      const __m512i l = lanes_u8(u, q, bias);
      v[j] = _mm512_castsi512_si256(l);
      v[j + 1] = _mm512_extracti64x4_epi64(l, 1);
    }
    alignas(32) float isum[8];
    _mm256_store_ps(isum, _mm256_cvtepi32_ps(block_sums8(v)));
    for (int j = 0; j < 8; ++j) s = std::fma(isum[j], h2f(w[b + j].d) * h2f(a[b + j].d), s);
  }
  for (; b < nb; ++b) {
    const int32_t isum = hsum_i32(lanes_u8(nibbles_q4_0(w[b].qs), load32(a[b].qs), _mm256_set1_epi8(8)));
    s = std::fma(float(isum), h2f(w[b].d) * h2f(a[b].d), s);
  }
  return s;
}

// Eight rows against up to eight activation rows, each (row, activation) sum in kernels.h's interleaved order: one
// exact integer sum per block, then acc = fma(float(isum), d_w * d_a, acc), a row per lane of acc. The integer sums
// come from four rows per 512-bit register and a short reduction; the bias term (8 * a) is the same for all eight
// rows and is computed once per activation block.
template <int NT>
DF_AVX512 inline void dot8_x8(int64_t n, const BlockQ4_0* const w[8], const BlockQ8_0* const a[], float* out) {
  const __m512i bias = _mm512_set1_epi8(8), low4 = _mm512_set1_epi8(0x0f), z = _mm512_setzero_si512();
  // Output lane r < 4 is row r (lane 0 of chunk r of the first half's sums), lane 4 + r row 4 + r (lane 1).
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    prefetch_next_rows8<_MM_HINT_T0>(w, b);
    // Four rows' 16 code bytes a register, a row per 128-bit chunk: the low nibbles are elements 0..15, the high
    // ones 16..31, so lane j of chunk r sums row r's elements 4j..4j+3 and 16+4j..16+4j+3 against the activation's
    // two halves broadcast to every chunk.
    __m512i lo[2], hi[2];
    for (int h = 0; h < 2; ++h) {
      __m512i c = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[4 * h][b].qs)));
      for (int r = 1; r < 4; ++r)
        c = _mm512_inserti32x4(c, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[4 * h + r][b].qs)), r);
      lo[h] = _mm512_and_si512(c, low4);
      hi[h] = _mm512_and_si512(_mm512_srli_epi16(c, 4), low4);
    }
    alignas(16) uint16_t d[8];
    for (int i = 0; i < 8; ++i) d[i] = w[i][b].d;
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d)));
    for (int t = 0; t < NT; ++t) {
      const __m512i qlo = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a[t][b].qs)));
      const __m512i qhi = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a[t][b].qs + 16)));
      // (code - 8) * a as code * a - 8 * a; the bias term is the same for every row.
      const __m512i qb = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, bias, qlo), bias, qhi);
      const __m512i s0 = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo[0], qlo), hi[0], qhi), qb);
      const __m512i s1 = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo[1], qlo), hi[1], qhi), qb);
      // Each chunk's four lanes summed (integer adds: the block's exact sum in any order): lane 0 of chunk r holds
      // row r's, lane 1 row 4 + r's.
      const __m512i x = _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
      const __m512i y = _mm512_add_epi32(x, _mm512_shuffle_epi32(x, _MM_PERM_BADC));
      const __m256i sums = _mm512_castsi512_si256(_mm512_permutexvar_epi32(pick, y));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dw, _mm256_set1_ps(h2f(a[t][b].d))), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + 8 * t, acc[t]);
}

// dot_f16_single of up to eight keys side by side. The AVX2 order keeps four 8-lane accumulators a key, for elements
// 32i + 8j .. +7 (j = 0..3), and ends (acc0 + acc2) + (acc1 + acc3); here one 16-lane register holds acc0 and acc1,
// another acc2 and acc3, so the same multiply-adds run lane for lane and (acc01 + acc23) then its halves' sum is the
// same ending. The query is widened in registers at each step (a stack copy of it, and the key loops left rolled,
// cost more than the products at 128-element heads), and the lanes are summed in registers.
template <int K>
DF_AVX512 inline void f16_single_keys(int64_t n, const uint16_t* k, int64_t stride, const uint16_t* a, float* out) {
  const int64_t whole = n / 32 * 32;
  __m512 lo[K], hi[K];
#pragma GCC unroll 8
  for (int j = 0; j < K; ++j) lo[j] = hi[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < whole; i += 32) {
    const __m512 qa = load_f16x16(a + i), qb = load_f16x16(a + i + 16);
#pragma GCC unroll 8
    for (int j = 0; j < K; ++j) {
      const uint16_t* kj = k + j * stride + i;
      lo[j] = _mm512_fmadd_ps(load_f16x16(kj), qa, lo[j]);
      hi[j] = _mm512_fmadd_ps(load_f16x16(kj + 16), qb, hi[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < K; ++j) {
    // Lanes l[0..7] of the AVX2 ending, then ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)) in float.
    const __m512 s = _mm512_add_ps(lo[j], hi[j]);
    const __m256 l = _mm256_add_ps(_mm512_castps512_ps256(s), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    const __m128 x = _mm_add_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps(l, 1));
    const __m128 p = _mm_add_ps(x, _mm_movehdup_ps(x));
    const float lanes = _mm_cvtss_f32(p) + _mm_cvtss_f32(_mm_movehl_ps(p, p));
    double sum = lanes;
    const uint16_t* kj = k + j * stride;
    for (int64_t i = whole; i < n; ++i) sum += double(h2f(kj[i]) * h2f(a[i]));
    out[j] = float(sum);
  }
}

// y = f16(fma(x, v, y)) and y = f16(y * v) element by element, as the AVX2 and scalar tables round them.
DF_AVX512 void mad_f16(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  const __m512 vv = _mm512_set1_ps(v);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 r = _mm512_fmadd_ps(load_f16x16(x + i), vv, load_f16x16(y + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = f2h(std::fma(h2f(x[i]), v, h2f(y[i])));
}

DF_AVX512 void scale_f16(int64_t n, uint16_t* y, float v) {
  const __m512 vv = _mm512_set1_ps(v);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 r = _mm512_mul_ps(load_f16x16(y + i), vv);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = f2h(h2f(y[i]) * v);
}

DF_AVX512 void dot_f16_single_keys(int n_keys, int64_t n, const uint16_t* k, int64_t stride, const uint16_t* a,
                                   float* out) {
  switch (n_keys) {
    case 1: return f16_single_keys<1>(n, k, stride, a, out);
    case 2: return f16_single_keys<2>(n, k, stride, a, out);
    case 3: return f16_single_keys<3>(n, k, stride, a, out);
    case 4: return f16_single_keys<4>(n, k, stride, a, out);
    case 5: return f16_single_keys<5>(n, k, stride, a, out);
    case 6: return f16_single_keys<6>(n, k, stride, a, out);
    case 7: return f16_single_keys<7>(n, k, stride, a, out);
    default: return f16_single_keys<8>(n, k, stride, a, out);
  }
}

DF_AVX512 void dot8_q4_0_q8_0_x8(int64_t n, const BlockQ4_0* const w[8], const BlockQ8_0* const a[], int nt,
                                 float* out) {
  switch (nt) {
    case 1: return dot8_x8<1>(n, w, a, out);
    case 2: return dot8_x8<2>(n, w, a, out);
    case 3: return dot8_x8<3>(n, w, a, out);
    case 4: return dot8_x8<4>(n, w, a, out);
    case 5: return dot8_x8<5>(n, w, a, out);
    case 6: return dot8_x8<6>(n, w, a, out);
    case 7: return dot8_x8<7>(n, w, a, out);
    default: return dot8_x8<8>(n, w, a, out);
  }
}

DF_AVX512 void dot4_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* const a[4], float out[4]) {
  const __m256i flip = _mm256_set1_epi8(char(0x80));
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i u = _mm256_xor_si256(load32(w[b].qs), flip);
    const float dw = h2f(w[b].d);
    for (int t = 0; t < 4; ++t) {
      const __m256 p = _mm256_cvtepi32_ps(lanes_u8(u, load32(a[t][b].qs), flip));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(a[t][b].d)), p, acc[t]);
    }
  }
  for (int t = 0; t < 4; ++t) out[t] = sum_lanes(acc[t]);
}

}  // namespace

const Kernels* avx512_kernels() {
  static const Kernels* table = []() -> const Kernels* {
    const Kernels* base = avx2_kernels();
    if (!base || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vnni"))
      return nullptr;
    static Kernels k = *base;
    k.name = "avx512";
    k.dot_q4_0_q8_0 = dot_q4_0_q8_0;
    k.dot_q8_0_q8_0 = dot_q8_0_q8_0;
    k.dot4_q4_0_q8_0 = dot4_q4_0_q8_0;
    k.dot4_q8_0_q8_0 = dot4_q8_0_q8_0;
    k.dot_q4_0_q8_0_x8 = dot_q4_0_q8_0_x8;
    k.dot8_q4_0_q8_0_x8 = dot8_q4_0_q8_0_x8;
    k.dot_f16_single_keys = dot_f16_single_keys;
    k.mad_f16 = mad_f16;
    k.scale_f16 = scale_f16;
    k.dot_q2_k_q8_k = avx512::dot_q2_k_q8_k;
    k.dot_q3_k_q8_k = avx512::dot_q3_k_q8_k;
    k.dot_q4_k_q8_k = avx512::dot_q4_k_q8_k;
    k.dot_q4_k_q8_k_x8 = avx512::dot_q4_k_q8_k_x8;
    k.dot8_q4_k_q8_k_x8 = avx512::dot8_q4_k_q8_k_x8;
    k.dotn_q2_k_q8_k = avx512::dotn_q2_k_q8_k;
    k.dotn_q3_k_q8_k = avx512::dotn_q3_k_q8_k;
    k.dotn_q5_k_q8_k = avx512::dotn_q5_k_q8_k;
    k.dotn_iq4_xs_q8_k = avx512::dotn_iq4_xs_q8_k;
    k.dotn_q6_k_q8_k = avx512::dotn_q6_k_q8_k;
    k.dot_q5_k_q8_k = avx512::dot_q5_k_q8_k;
    k.dot_q6_k_q8_k = avx512::dot_q6_k_q8_k;
    k.dot_iq4_xs_q8_k = avx512::dot_iq4_xs_q8_k;
    k.dot_q2_k_q8_0 = avx512::dot_q2_k_q8_0;
    k.dot_q3_k_q8_0 = avx512::dot_q3_k_q8_0;
    k.dot_q4_k_q8_0 = avx512::dot_q4_k_q8_0;
    k.dot_q5_k_q8_0 = avx512::dot_q5_k_q8_0;
    k.dot_q6_k_q8_0 = avx512::dot_q6_k_q8_0;
    k.dot_iq4_xs_q8_0 = avx512::dot_iq4_xs_q8_0;
    return &k;
  }();
  return table;
}

}  // namespace df::cpu
