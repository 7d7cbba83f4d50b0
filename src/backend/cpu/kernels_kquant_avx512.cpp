// AVX-512 VNNI K-quant kernels: 64 codes per vpdpbusd (unsigned codes times signed activations, four products a
// lane), each lane times its sub-block scale, the two 32-element halves folded into the 8 integer lanes of kernels.h
// once per super-block. The integer lanes equal the AVX2 table's, and the float steps are the same, so results are
// bit-identical to scalar_kernels().
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/kernels_impl.h"
#include "diskformer/backend/cpu/kernels.h"

#define DF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// GCC 12's AVX-512 headers build some intrinsics from deliberately undefined registers and then warn about them.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace df::cpu::avx512 {

namespace {

DF_AVX512 inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

DF_AVX512 inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
DF_AVX512 inline __m256i load256(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
DF_AVX512 inline __m128i load128(const void* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// Two 256-bit halves as one vector: elements 0..31 from lo, 32..63 from hi.
DF_AVX512 inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1);
}

// 16 int32 lanes of 4 products each: unsigned codes u (0..255) times signed activations a.
DF_AVX512 inline __m512i dp(__m512i u, __m512i a) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, a); }

// Per-lane scales: s[0] for lanes 0..7 (elements 0..31), s[1] for lanes 8..15 (a scale per 32 elements).
DF_AVX512 inline __m512i scales32(int s0, int s1) {
  return _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(s0), _mm512_set1_epi32(s1));
}
// A scale per 16 elements: lanes 4i .. 4i + 3 take s[i].
DF_AVX512 inline __m512i scales16(int s0, int s1, int s2, int s3) {
  return _mm512_set_epi32(s3, s3, s3, s3, s2, s2, s2, s2, s1, s1, s1, s1, s0, s0, s0, s0);
}

// The 8 lanes of kernels.h: lane k of both halves added.
DF_AVX512 inline __m256i fold(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

DF_AVX512 inline float sum_lanes(__m256 acc) {
  alignas(32) float l[8];
  _mm256_store_ps(l, acc);
  return lanes8_sum(l);
}

DF_AVX512 inline __m512i nibbles() { return _mm512_set1_epi8(0x0f); }

struct ScalesMins {
  uint8_t sc[8], mn[8];
};
// kquant_scale_min for all eight sub-blocks, four bytes at a time: the 12 packed bytes as words w0 (low 6 bits:
// scales 0..3), w1 (mins 0..3) and w2 (low nibbles of scales 4..7, high nibbles of mins 4..7), whose top 2 bits
// per byte in w0 and w1 complete scales and mins 4..7.
inline ScalesMins scales_mins(const uint8_t* packed) {
  uint32_t w[3];
  std::memcpy(w, packed, sizeof w);
  constexpr uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  const uint32_t sc[2] = {w[0] & low6, (w[2] & low4) | (((w[0] >> 6) & low2) << 4)};
  const uint32_t mn[2] = {w[1] & low6, ((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4)};
  ScalesMins s;
  std::memcpy(s.sc, sc, sizeof sc);
  std::memcpy(s.mn, mn, sizeof mn);
  return s;
}

// Q4_K / Q5_K min term as 4 int32 lanes (lane k: sub-blocks 2k, 2k + 1), as in the AVX2 table.
DF_AVX512 inline __m128i min_lanes(const ScalesMins& s, const BlockQ8_K& y) {
  const __m128i pair_sums = _mm_hadd_epi16(load128(y.bsums), load128(y.bsums + 8));
  const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.mn)));
  return _mm_madd_epi16(mins, pair_sums);
}

// Scaled sums of a Q4_K / Q5_K super-block per 64 elements (j: elements 64j .. 64j + 63, codes q).
DF_AVX512 inline __m512i q45_chunk(__m512i q, const BlockQ8_K& y, const ScalesMins& s, int j) {
  return _mm512_mullo_epi32(dp(q, load512(y.qs + 64 * j)), scales32(s.sc[2 * j], s.sc[2 * j + 1]));
}

DF_AVX512 inline __m512i q4_codes(const BlockQ4_K& x, int j) {
  const __m256i bits = load256(x.qs + 32 * j);
  return _mm512_and_si512(join(bits, _mm256_srli_epi16(bits, 4)), nibbles());
}

// A super-block's unsigned codes as four vectors (vector i: elements 64i .. 64i + 63): Q2_K's two bits, Q3_K's
// three (the code plus 4), Q5_K's five, IQ4_XS's table values plus 128 (table: those 16 values in every chunk).
DF_AVX512 inline void q2_codes(const BlockQ2_K& x, __m512i (&q)[4]) {
  for (int j = 0; j < 2; ++j) {
    const __m256i bits = load256(x.qs + 32 * j);
    const __m512i both = join(bits, bits);
    for (int g = 0; g < 4; g += 2)  // shifts 2g and 2g + 2 hold elements 128j + 32g .. + 63
      q[2 * j + g / 2] = _mm512_and_si512(
          _mm512_mask_blend_epi64(0xf0, _mm512_srli_epi16(both, 2 * g), _mm512_srli_epi16(both, 2 * g + 2)),
          _mm512_set1_epi8(3));
  }
}
DF_AVX512 inline void q3_codes(const BlockQ3_K& x, __m512i (&u)[4]) {
  const __m256i h = load256(x.hmask);
  const __m512i hh = join(h, h);
  for (int j = 0; j < 2; ++j) {
    const __m256i bits = load256(x.qs + 32 * j);
    const __m512i both = join(bits, bits);
    for (int g = 0; g < 4; g += 2) {
      const int t = 4 * j + g;  // the hmask bits of the two 32-element groups
      const __m512i lo = _mm512_and_si512(
          _mm512_mask_blend_epi64(0xf0, _mm512_srli_epi16(both, 2 * g), _mm512_srli_epi16(both, 2 * g + 2)),
          _mm512_set1_epi8(3));
      const __m512i hi = _mm512_and_si512(
          _mm512_mask_blend_epi64(0xf0, _mm512_srli_epi16(hh, t), _mm512_srli_epi16(hh, t + 1)), _mm512_set1_epi8(1));
      u[2 * j + g / 2] = _mm512_add_epi8(lo, _mm512_slli_epi16(hi, 2));
    }
  }
}
DF_AVX512 inline void q5_codes(const BlockQ5_K& x, __m512i (&q)[4]) {
  const __m256i h = load256(x.qh);
  const __m512i hh = join(h, h);
  for (int j = 0; j < 4; ++j) {
    const __m512i bit = _mm512_mask_blend_epi64(0xf0, _mm512_srli_epi16(hh, 2 * j), _mm512_srli_epi16(hh, 2 * j + 1));
    const __m512i fifth = _mm512_slli_epi16(_mm512_and_si512(bit, _mm512_set1_epi8(1)), 4);
    const __m256i bits = load256(x.qs + 32 * j);
    q[j] = _mm512_add_epi8(_mm512_and_si512(join(bits, _mm256_srli_epi16(bits, 4)), nibbles()), fifth);
  }
}
DF_AVX512 inline void iq4_xs_codes(const BlockIQ4_XS& x, __m512i table, __m512i (&u)[4]) {
  for (int i = 0; i < 4; ++i) {  // sub-blocks 2i and 2i + 1: their low nibbles are elements 0..15, high 16..31
    const __m128i r0 = load128(x.qs + 32 * i), r1 = load128(x.qs + 32 * i + 16);
    const __m512i codes = _mm512_and_si512(
        join(_mm256_set_m128i(_mm_srli_epi16(r0, 4), r0), _mm256_set_m128i(_mm_srli_epi16(r1, 4), r1)), nibbles());
    u[i] = _mm512_shuffle_epi8(table, codes);
  }
}
DF_AVX512 inline __m512i iq4_biased_table() {
  alignas(16) uint8_t biased[16];
  for (int i = 0; i < 16; ++i) biased[i] = uint8_t(kIQ4NLValues[i] + 128);
  return _mm512_broadcast_i32x4(load128(biased));
}

}  // namespace

DF_AVX512 float dot_q2_k_q8_k(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a) {
  float out;  // the several-row kernel's steps for one row are the one-row order's
  dotn_q2_k_q8_k(n, w, &a, 1, &out);
  return out;
}

// A block's integer lanes from codes stored plus 2^kShift (Q3_K: 4, IQ4_XS table values: 128), four 64-element
// chunks u[i] with their per-lane scales sc[i]: sum of (u * a - 2^kShift * a) * scale, as the one-row kernels form it.
template <int kShift>
DF_AVX512 inline __m512i biased_sums(const __m512i (&u)[4], const __m512i (&sc)[4], const BlockQ8_K& y) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i sumi = _mm512_setzero_si512();
  for (int i = 0; i < 4; ++i) {
    const __m512i q8 = load512(y.qs + 64 * i);
    const __m512i p = _mm512_sub_epi32(dp(u[i], q8), _mm512_slli_epi32(dp(ones, q8), kShift));
    sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, sc[i]));
  }
  return sumi;
}

// dot_q2_k_q8_k of one row with nt activation rows, the block's codes, scales and mins unpacked once for all.
DF_AVX512 void dotn_q2_k_q8_k(int64_t n, const BlockQ2_K* w, const BlockQ8_K* const a[], int nt, float* out) {
  __m256 acc[8];
  for (int t = 0; t < nt; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& x = w[b];
    const __m128i raw = load128(x.scales);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f)));
    __m512i q[4], sc[4];  // elements 64i .. 64i + 63 as dot_q2_k_q8_k takes them
    q2_codes(x, q);
    for (int i = 0; i < 4; ++i)
      sc[i] = scales16(x.scales[4 * i] & 0x0f, x.scales[4 * i + 1] & 0x0f, x.scales[4 * i + 2] & 0x0f,
                       x.scales[4 * i + 3] & 0x0f);
    const float dw = h2f(x.d), mw = h2f(x.dmin);
    for (int t = 0; t < nt; ++t) {
      const BlockQ8_K& y = a[t][b];
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-y.d * mw), _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, load256(y.bsums))),
                               acc[t]);
      __m512i sumi = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i) sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(dp(q[i], load512(y.qs + 64 * i)), sc[i]));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y.d * dw), _mm256_cvtepi32_ps(fold(sumi)), acc[t]);
    }
  }
  for (int t = 0; t < nt; ++t) out[t] = sum_lanes(acc[t]);
}

DF_AVX512 float dot_q3_k_q8_k(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a) {
  float out;  // the several-row kernel's steps for one row are the one-row order's
  dotn_q3_k_q8_k(n, w, &a, 1, &out);
  return out;
}

// dot_q3_k_q8_k of one row with nt activation rows, the block's codes and scales unpacked once for all.
DF_AVX512 void dotn_q3_k_q8_k(int64_t n, const BlockQ3_K* w, const BlockQ8_K* const a[], int nt, float* out) {
  __m256 acc[8];
  for (int t = 0; t < nt; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ3_K& x = w[b];
    int sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = q3_k_scale(j, x.scales);
    __m512i u[4], scv[4];  // elements 64i .. 64i + 63 as dot_q3_k_q8_k takes them
    q3_codes(x, u);
    for (int i = 0; i < 4; ++i) scv[i] = scales16(sc[4 * i], sc[4 * i + 1], sc[4 * i + 2], sc[4 * i + 3]);
    const float dw = h2f(x.d);
    for (int t = 0; t < nt; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t][b].d * dw), _mm256_cvtepi32_ps(fold(biased_sums<2>(u, scv, a[t][b]))),
                               acc[t]);
  }
  for (int t = 0; t < nt; ++t) out[t] = sum_lanes(acc[t]);
}

DF_AVX512 float dot_q4_k_q8_k(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a) {
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * h2f(x.d), dmin = -y.d * h2f(x.dmin);
    const ScalesMins s = scales_mins(x.scales);
    acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(min_lanes(s, y)), acc_m);
    __m512i sumi = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) sumi = _mm512_add_epi32(sumi, q45_chunk(q4_codes(x, j), y, s, j));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold(sumi)), acc);
  }
  alignas(16) float m[4];
  _mm_store_ps(m, acc_m);
  return sum_lanes(acc) + ((m[0] + m[2]) + (m[1] + m[3]));
}

DF_AVX512 float dot_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a) {
  float s = 0.0f, sm = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const ScalesMins scm = scales_mins(x.scales);
    __m512i sumi = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) sumi = _mm512_add_epi32(sumi, q45_chunk(q4_codes(x, j), y, scm, j));
    alignas(16) int32_t ml[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(ml), min_lanes(scm, y));
    s = std::fma(float(_mm512_reduce_add_epi32(sumi)), h2f(x.d) * y.d, s);
    sm = std::fma(float((ml[0] + ml[1]) + (ml[2] + ml[3])), h2f(x.dmin) * y.d, sm);
  }
  return s - sm;
}

// Eight Q4_K rows at once, their sums in the lanes of one vector (rows 0..7), the weight block unpacked once for all
// nt activation rows: per 64-element chunk j of a block, four registers hold 16 code bytes of four rows each (a row
// per 128-bit chunk) against the activation's matching 16 bytes broadcast to every chunk, so that after vpdpbusd
// lane k of chunk r holds 4 products of row r; each chunk's four lanes then are summed into row r's lane (as
// dot8_q4_0_q8_0_x8 does), times the sub-block's scales of the eight rows. The integer sums are the per-row kernels'
// exactly; the multiply-adds are the same per lane: the batched order's per chunk, the one-row order's per block.
namespace {

// 16 bytes at offset off of rows 4h .. 4h + 3's block b, a row per 128-bit chunk.
DF_AVX512 inline __m512i rows4(const BlockQ4_K* const w[8], int64_t b, int h, int off) {
  __m512i c = _mm512_castsi128_si512(load128(w[4 * h][b].qs + off));
  for (int r = 1; r < 4; ++r) c = _mm512_inserti32x4(c, load128(w[4 * h + r][b].qs + off), r);
  return c;
}

// Row r's sum (chunk r of s0 for r < 4, of s1 for r >= 4) in lane r: the four lanes of each chunk added (exact).
DF_AVX512 inline __m256i chunk_sums8(__m512i s0, __m512i s1) {
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i x = _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
  const __m512i y = _mm512_add_epi32(x, _mm512_shuffle_epi32(x, _MM_PERM_BADC));
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(pick, y));
}

// Row r's sum of v[r]'s 16 lanes in lane r (exact).
DF_AVX512 inline __m256i row_sums8(const __m512i (&v)[8]) {
  __m512i t[4];  // per 128-bit chunk: two rows' partial sums interleaved
  for (int i = 0; i < 4; ++i)
    t[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  // Per 128-bit chunk: rows 0..3 (u0), 4..7 (u1) in lanes 0..3.
  const __m512i u0 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[0], t[1]), _mm512_unpackhi_epi64(t[0], t[1]));
  const __m512i u1 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2], t[3]), _mm512_unpackhi_epi64(t[2], t[3]));
  const __m512i h = _mm512_add_epi32(_mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_castsi512_si256(_mm512_add_epi32(_mm512_shuffle_i32x4(h, h, _MM_SHUFFLE(3, 1, 2, 0)),
                                                 _mm512_shuffle_i32x4(h, h, _MM_SHUFFLE(2, 0, 3, 1))));
}

// Four rows' block headers (d, dmin, 12 packed bytes), a row per 128-bit chunk, unpacked to bytes 0..7: the scales,
// 8..15: the mins (kquant_scale_min, as scales_mins does it for one row).
DF_AVX512 inline __m512i scale_min_bytes(__m512i hdr) {
  const __m512i lows = _mm512_shuffle_epi8(  // packed bytes 0..3, 8..11, 4..7, 8..11
      hdr, _mm512_broadcast_i32x4(_mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
  const __m512i tops = _mm512_shuffle_epi8(  // packed bytes 0..3 to bytes 4..7, 4..7 to 12..15, the rest zero
      hdr, _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11)));
  const __m512i keep = _mm512_broadcast_i32x4(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
  const __m512i high = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
  const __m512i low = _mm512_or_si512(_mm512_and_si512(lows, keep), _mm512_and_si512(_mm512_srli_epi16(lows, 4), high));
  return _mm512_or_si512(low, _mm512_srli_epi16(_mm512_and_si512(tops, _mm512_set1_epi8(char(0xc0))), 2));
}

// dot8_q4_k_q8_k_x8 with one activation row (decode): each row's codes read contiguously and multiplied pairwise
// (vpmaddubsw, exact: 2 * 15 * 128 fits int16) then by their scales as int16 pairs (vpdpwssd), the activation's
// 64-element vectors arranged once per block for all eight rows, the rows' scales and mins unpacked four rows a
// vector, the per-row sums reduced into the lanes of one vector. The integer sums are the one-row order's exactly.
DF_AVX512 void dot8_q4_k_one(int64_t n, const BlockQ4_K* const w[8], const BlockQ8_K* a, float* out) {
  const __m512i low4 = nibbles();
  // Per 128-bit chunk of vector i: the int16 scale of its sub-block (chunks 0, 1: sub-block lo[i], 2, 3: hi[i]).
  constexpr int lo[4] = {0, 1, 4, 5}, hi[4] = {2, 3, 6, 7};
  __m512i pick_sc[4];
  for (int i = 0; i < 4; ++i) {
    const __m128i l = _mm_set1_epi16(int16_t(0xff00 | lo[i])), h = _mm_set1_epi16(int16_t(0xff00 | hi[i]));
    pick_sc[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(l, l)), _mm256_set_m128i(h, h), 1);
  }
  const __m512i pick_mn = _mm512_broadcast_i32x4(_mm_setr_epi8(8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1));
  // Words d (0) and dmin (1) of the eight headers, rows 0..3 in the first vector, 4..7 in the second.
  const __m512i pick_d = _mm512_setr_epi32(0 | 8 << 16, 16 | 24 << 16, 32 | 40 << 16, 48 | 56 << 16, 0, 0, 0, 0, 0, 0,
                                           0, 0, 0, 0, 0, 0);
  const __m512i pick_dmin = _mm512_add_epi16(pick_d, _mm512_set1_epi16(1));
  __m256 s = _mm256_setzero_ps(), sm = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    prefetch_next_rows8<_MM_HINT_T1>(w, b);
    const BlockQ8_K& y = a[b];
    const __m512i act[4] = {join(load256(y.qs), load256(y.qs + 64)), join(load256(y.qs + 32), load256(y.qs + 96)),
                            join(load256(y.qs + 128), load256(y.qs + 192)),
                            join(load256(y.qs + 160), load256(y.qs + 224))};
    const __m512i pairs = _mm512_broadcast_i32x4(_mm_hadd_epi16(load128(y.bsums), load128(y.bsums + 8)));
    __m512i hdr[2];
    for (int h = 0; h < 2; ++h) {
      hdr[h] = _mm512_castsi128_si512(load128(&w[4 * h][b]));
      for (int r = 1; r < 4; ++r) hdr[h] = _mm512_inserti32x4(hdr[h], load128(&w[4 * h + r][b]), r);
    }
    alignas(64) __m512i scm[2] = {scale_min_bytes(hdr[0]), scale_min_bytes(hdr[1])};
    const __m256i mins = chunk_sums8(_mm512_madd_epi16(_mm512_shuffle_epi8(scm[0], pick_mn), pairs),
                                     _mm512_madd_epi16(_mm512_shuffle_epi8(scm[1], pick_mn), pairs));
    __m512i sums[8];
    for (int r = 0; r < 8; ++r) {
      const __m512i sc = _mm512_broadcast_i32x4(load128(reinterpret_cast<const uint8_t*>(scm) + 16 * r));
      const __m512i v0 = load512(w[r][b].qs), v1 = load512(w[r][b].qs + 64);
      const __m512i c[4] = {_mm512_and_si512(v0, low4), _mm512_and_si512(_mm512_srli_epi16(v0, 4), low4),
                            _mm512_and_si512(v1, low4), _mm512_and_si512(_mm512_srli_epi16(v1, 4), low4)};
      __m512i acc = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i)
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(c[i], act[i]), _mm512_shuffle_epi8(sc, pick_sc[i]));
      sums[r] = acc;
    }
    const __m256 dw = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi16(hdr[0], pick_d, hdr[1])));
    const __m256 mw = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi16(hdr[0], pick_dmin, hdr[1])));
    const __m256 dy = _mm256_set1_ps(y.d);
    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(row_sums8(sums)), _mm256_mul_ps(dw, dy), s);
    sm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(mw, dy), sm);
  }
  _mm256_storeu_ps(out, _mm256_sub_ps(s, sm));
}

}  // namespace

DF_AVX512 void dot8_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* const w[8], const BlockQ8_K* const a[], int nt,
                                 int n_grouped, float* out) {
  if (nt == 1 && n_grouped == 0) return dot8_q4_k_one(n, w, a[0], out);
  const __m512i low4 = nibbles();
  const __m256i ones16 = _mm256_set1_epi16(1);
  alignas(64) __m256 s[kQ4KTileTokens], sm[kQ4KTileTokens];
  for (int t = 0; t < nt; ++t) s[t] = sm[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    // The eight rows' codes of the block: code[j][h][p], p = 0, 1 (elements 64j + 16p ..: sub-block 2j) and 2, 3
    // (64j + 32 + 16(p - 2) ..: sub-block 2j + 1).
    __m512i code[4][2][4];
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) {
        const __m512i c0 = rows4(w, b, h, 32 * j), c1 = rows4(w, b, h, 32 * j + 16);
        code[j][h][0] = _mm512_and_si512(c0, low4);
        code[j][h][1] = _mm512_and_si512(c1, low4);
        code[j][h][2] = _mm512_and_si512(_mm512_srli_epi16(c0, 4), low4);
        code[j][h][3] = _mm512_and_si512(_mm512_srli_epi16(c1, 4), low4);
      }
    // Scales as int32 lanes per sub-block, mins as int16 pairs per two sub-blocks (lane r: row r's), the rows' d and
    // dmin.
    alignas(32) int32_t sc[8][8];
    alignas(32) int16_t mn[4][8][2];
    alignas(16) uint16_t dh[8], mh[8];
    for (int r = 0; r < 8; ++r) {
      const ScalesMins scm = scales_mins(w[r][b].scales);
      for (int k = 0; k < 8; ++k) sc[k][r] = scm.sc[k], mn[k / 2][r][k % 2] = int16_t(scm.mn[k]);
      dh[r] = w[r][b].d, mh[r] = w[r][b].dmin;
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    const __m256 mw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mh)));
    for (int t = 0; t < nt; ++t) {
      const BlockQ8_K& y = a[t][b];
      // The activation's bsums added in pairs (each sub-block's), as int16 pairs of two sub-blocks.
      alignas(16) int32_t pairs[4];
      const __m256i ps = _mm256_madd_epi16(load256(y.bsums), ones16);
      _mm_store_si128(reinterpret_cast<__m128i*>(pairs),
                      _mm_packs_epi32(_mm256_castsi256_si128(ps), _mm256_extracti128_si256(ps, 1)));
      const __m256 dy = _mm256_mul_ps(dw, _mm256_set1_ps(y.d)), my = _mm256_mul_ps(mw, _mm256_set1_ps(y.d));
      const bool grouped = t < n_grouped;
      __m256i tot = _mm256_setzero_si256(), msum = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        __m512i sb[2][2];  // [sub-block 2j + k][row half]
        for (int k = 0; k < 2; ++k) {
          const __m512i a0 = _mm512_broadcast_i32x4(load128(y.qs + 64 * j + 32 * k));
          const __m512i a1 = _mm512_broadcast_i32x4(load128(y.qs + 64 * j + 32 * k + 16));
          for (int h = 0; h < 2; ++h)
            sb[k][h] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), code[j][h][2 * k], a0),
                                           code[j][h][2 * k + 1], a1);
        }
        const __m256i tj = _mm256_add_epi32(
            _mm256_mullo_epi32(chunk_sums8(sb[0][0], sb[0][1]), _mm256_load_si256(reinterpret_cast<const __m256i*>(sc[2 * j]))),
            _mm256_mullo_epi32(chunk_sums8(sb[1][0], sb[1][1]),
                               _mm256_load_si256(reinterpret_cast<const __m256i*>(sc[2 * j + 1]))));
        const __m256i mj = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(mn[j])),
                                             _mm256_set1_epi32(pairs[j]));
        if (grouped) {
          s[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tj), dy, s[t]);
          sm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mj), my, sm[t]);
        } else {
          tot = _mm256_add_epi32(tot, tj);
          msum = _mm256_add_epi32(msum, mj);
        }
      }
      if (!grouped) {
        s[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), dy, s[t]);
        sm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), my, sm[t]);
      }
    }
  }
  for (int t = 0; t < nt; ++t) _mm256_storeu_ps(out + 8 * t, _mm256_sub_ps(s[t], sm[t]));
}

DF_AVX512 float dot_q5_k_q8_k(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a) {
  float out;  // the several-row kernel's steps for one row are the one-row order's
  dotn_q5_k_q8_k(n, w, &a, 1, &out);
  return out;
}

// dot_q5_k_q8_k of one row with nt activation rows, the block's codes, scales and mins unpacked once for all.
DF_AVX512 void dotn_q5_k_q8_k(int64_t n, const BlockQ5_K* w, const BlockQ8_K* const a[], int nt, float* out) {
  __m256 acc[8];
  float sm[8] = {};
  for (int t = 0; t < nt; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ5_K& x = w[b];
    const ScalesMins s = scales_mins(x.scales);
    __m512i q[4], sc[4];
    q5_codes(x, q);
    for (int j = 0; j < 4; ++j) sc[j] = scales32(s.sc[2 * j], s.sc[2 * j + 1]);
    const float dw = h2f(x.d), mw = h2f(x.dmin);
    for (int t = 0; t < nt; ++t) {
      const BlockQ8_K& y = a[t][b];
      alignas(16) int32_t ml[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(ml), min_lanes(s, y));
      sm[t] = std::fma(-y.d * mw, float((ml[0] + ml[1]) + (ml[2] + ml[3])), sm[t]);
      __m512i sumi = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(dp(q[j], load512(y.qs + 64 * j)), sc[j]));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y.d * dw), _mm256_cvtepi32_ps(fold(sumi)), acc[t]);
    }
  }
  for (int t = 0; t < nt; ++t) out[t] = sum_lanes(acc[t]) + sm[t];
}

// Group g = 2j + half of a Q6_K block's 64-element codes: groups 0, 1 (of a j) use the low nibbles of ql[64j ..] and
// ql[64j + 32 ..], groups 2, 3 their high nibbles; the high two bits come from qh[32j ..] at shifts 2g.
DF_AVX512 inline __m512i q6_codes(const BlockQ6_K& x, int j, int half) {
  const __m512i l = load512(x.ql + 64 * j);
  const __m256i h = load256(x.qh + 32 * j);
  const __m512i hh = join(h, _mm256_srli_epi16(h, 2));
  const __m512i lo = _mm512_and_si512(half ? _mm512_srli_epi16(l, 4) : l, nibbles());
  const __m512i hi = _mm512_and_si512(half ? _mm512_srli_epi16(hh, 4) : hh, _mm512_set1_epi8(3));
  return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
}
// The group's four scales (one per 16 elements) as int32 lanes.
DF_AVX512 inline __m512i q6_scales(const BlockQ6_K& x, int j, int half) {
  const int sb = 8 * j + 4 * half;
  return scales16(x.scales[sb], x.scales[sb + 1], x.scales[sb + 2], x.scales[sb + 3]);
}

DF_AVX512 float dot_q6_k_q8_k(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * h2f(x.d);
    const __m256i off = _mm256_slli_epi32(
        _mm256_madd_epi16(load256(y.bsums), _mm256_cvtepi8_epi16(load128(x.scales))), 5);
    __m512i sumi = _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {
      const __m512i q = q6_codes(x, g / 2, g % 2), sc = q6_scales(x, g / 2, g % 2);
      sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(dp(q, load512(y.qs + 64 * g)), sc));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_sub_epi32(fold(sumi), off)), acc);
  }
  return sum_lanes(acc);
}

// dot_q6_k_q8_k's steps for each activation row, the block's codes and scales unpacked once for all.
DF_AVX512 void dotn_q6_k_q8_k(int64_t n, const BlockQ6_K* w, const BlockQ8_K* const a[], int nt, float* out) {
  __m256 acc[8];
  for (int t = 0; t < nt; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& x = w[b];
    const __m256i scales = _mm256_cvtepi8_epi16(load128(x.scales));
    __m512i q[4], sc[4];
    for (int g = 0; g < 4; ++g) q[g] = q6_codes(x, g / 2, g % 2), sc[g] = q6_scales(x, g / 2, g % 2);
    const float dw = h2f(x.d);
    for (int t = 0; t < nt; ++t) {
      const BlockQ8_K& y = a[t][b];
      const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(load256(y.bsums), scales), 5);
      __m512i sumi = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i) sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(dp(q[i], load512(y.qs + 64 * i)), sc[i]));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y.d * dw), _mm256_cvtepi32_ps(_mm256_sub_epi32(fold(sumi), off)), acc[t]);
    }
  }
  for (int t = 0; t < nt; ++t) out[t] = sum_lanes(acc[t]);
}

// dot_iq4_xs_q8_k of one row with nt activation rows, the block's table values and scales looked up once for all.
DF_AVX512 void dotn_iq4_xs_q8_k(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* const a[], int nt, float* out) {
  const __m512i table = iq4_biased_table();
  __m256 acc[8];
  for (int t = 0; t < nt; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ4_XS& x = w[b];
    __m512i u[4], sc[4];  // [sub / 2]: sub-blocks sub and sub + 1 as dot_iq4_xs_q8_k takes them
    iq4_xs_codes(x, table, u);
    for (int sub = 0; sub < 8; sub += 2) sc[sub / 2] = scales32(iq4_xs_scale(sub, x), iq4_xs_scale(sub + 1, x));
    const float dw = h2f(x.d);
    for (int t = 0; t < nt; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a[t][b].d), _mm256_cvtepi32_ps(fold(biased_sums<7>(u, sc, a[t][b]))),
                               acc[t]);
  }
  for (int t = 0; t < nt; ++t) out[t] = sum_lanes(acc[t]);
}

DF_AVX512 float dot_iq4_xs_q8_k(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a) {
  float out;  // the several-row kernel's steps for one row are the one-row order's
  dotn_iq4_xs_q8_k(n, w, &a, 1, &out);
  return out;
}

// ---- The CUDA decode order against Q8_0 activations (kernels.h), a super-block (8 pieces, pieces 2i and 2i + 1 in
// vector i) at a time: unsigned codes (the signed ones less a bias) against the activation's codes by vpdpbusd, the
// bias taken off with the activation's code sums, each half's four lanes added (exact), the pieces' float steps in
// 8 lanes (lane j: piece j), and lane group b % 4 of the 32 accumulator lanes taking super-block b.
namespace {

// Per piece of a super-block, its halves' scales and offsets (lane j: piece j).
struct PieceScales {
  __m256 d0, d1, m0, m1;
};

// Lanes 4c + i of the result: the sum of chunk c's four lanes of v[i] (half c % 2 of piece 2i + c / 2).
DF_AVX512 inline __m512i half_sums(const __m512i (&v)[4]) {
  const __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
  const __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
}

// half_sums' lanes reordered: lanes 0..7 half 0 of pieces 0..7, lanes 8..15 their halves 1.
DF_AVX512 inline __m512i by_piece(__m512i h) {
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15), h);
}

// 16 int32 scales (lane k: sub-block k of 16) times d, split into the pieces' halves: even ones (half 0), odd ones
// (half 1).
DF_AVX512 inline void split_halves(__m512i sc16, float d, __m256& even, __m256& odd) {
  even = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm512_cvtepi64_epi32(sc16)));
  odd = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm512_cvtepi64_epi32(_mm512_srli_epi64(sc16, 32))));
}

// kBiasShift: the codes the block gives are the signed ones plus 2^kBiasShift (0: unsigned codes, no bias).
template <bool kHalves, bool kOffset, int kBiasShift = 0>
DF_AVX512 inline float pieces_q8_0(int64_t n, const BlockQ8_0* a, auto&& block) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ8_0* y = a + 8 * b;
    __m512i act[4], u[4];
    for (int i = 0; i < 4; ++i) act[i] = join(load256(y[2 * i].qs), load256(y[2 * i + 1].qs));
    PieceScales ps;
    block(b, u, ps);
    __m512i dots[4], sums[4];
    for (int i = 0; i < 4; ++i) {
      dots[i] = dp(u[i], act[i]);
      sums[i] = dp(ones, act[i]);
    }
    const __m512i halves_dot = by_piece(half_sums(dots)), halves_sum = by_piece(half_sums(sums));
    const __m512i pd =
        kBiasShift ? _mm512_sub_epi32(halves_dot, _mm512_slli_epi32(halves_sum, kBiasShift)) : halves_dot;
    const __m256i p0 = _mm512_castsi512_si256(pd), p1 = _mm512_extracti64x4_epi64(pd, 1);
    const __m256i s0 = _mm512_castsi512_si256(halves_sum), s1 = _mm512_extracti64x4_epi64(halves_sum, 1);
    __m256 s;
    if constexpr (kHalves) {
      s = _mm256_fmadd_ps(ps.d1, _mm256_cvtepi32_ps(p1), _mm256_mul_ps(ps.d0, _mm256_cvtepi32_ps(p0)));
      if constexpr (kOffset)
        s = _mm256_fmadd_ps(ps.m1, _mm256_cvtepi32_ps(s1), _mm256_fmadd_ps(ps.m0, _mm256_cvtepi32_ps(s0), s));
    } else {
      s = _mm256_mul_ps(ps.d0, _mm256_cvtepi32_ps(_mm256_add_epi32(p0, p1)));
      if constexpr (kOffset) s = _mm256_fmadd_ps(ps.m0, _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), s);
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

// A Q4_K / Q5_K block's scales and offsets per piece.
template <typename B>
DF_AVX512 inline PieceScales q45_scales(const B& x) {
  const ScalesMins sm = scales_mins(x.scales);
  auto eight = [](const uint8_t* v) DF_AVX512 {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v))));
  };
  const __m256 sc = eight(sm.sc), mn = eight(sm.mn);
  PieceScales ps;
  ps.d0 = ps.d1 = _mm256_mul_ps(_mm256_set1_ps(h2f(x.d)), sc);
  const __m256 m = _mm256_mul_ps(_mm256_set1_ps(h2f(x.dmin)), mn);
  ps.m0 = ps.m1 = _mm256_xor_ps(m, _mm256_set1_ps(-0.0f));
  return ps;
}

}  // namespace

DF_AVX512 float dot_q4_k_q8_0(int64_t n, const BlockQ4_K* w, const BlockQ8_0* a) {
  return pieces_q8_0<false, true>(n, a, [&](int64_t b, __m512i(&u)[4], PieceScales& ps) DF_AVX512 {
    const BlockQ4_K& x = w[b];
    for (int i = 0; i < 4; ++i) u[i] = q4_codes(x, i);
    ps = q45_scales(x);
  });
}

DF_AVX512 float dot_q5_k_q8_0(int64_t n, const BlockQ5_K* w, const BlockQ8_0* a) {
  return pieces_q8_0<false, true>(n, a, [&](int64_t b, __m512i(&u)[4], PieceScales& ps) DF_AVX512 {
    const BlockQ5_K& x = w[b];
    q5_codes(x, u);
    ps = q45_scales(x);
  });
}

DF_AVX512 float dot_q6_k_q8_0(int64_t n, const BlockQ6_K* w, const BlockQ8_0* a) {
  return pieces_q8_0<true, false, 5>(n, a, [&](int64_t b, __m512i(&u)[4], PieceScales& ps) DF_AVX512 {
    const BlockQ6_K& x = w[b];
    for (int i = 0; i < 4; ++i) u[i] = q6_codes(x, i / 2, i % 2);
    split_halves(_mm512_cvtepi8_epi32(load128(x.scales)), h2f(x.d), ps.d0, ps.d1);
  });
}

DF_AVX512 float dot_q3_k_q8_0(int64_t n, const BlockQ3_K* w, const BlockQ8_0* a) {
  return pieces_q8_0<true, false, 2>(n, a, [&](int64_t b, __m512i(&u)[4], PieceScales& ps) DF_AVX512 {
    const BlockQ3_K& x = w[b];
    q3_codes(x, u);
    alignas(64) int32_t sc[16];
    for (int k = 0; k < 16; ++k) sc[k] = q3_k_scale(k, x.scales);
    split_halves(_mm512_load_si512(sc), h2f(x.d), ps.d0, ps.d1);
  });
}

DF_AVX512 float dot_q2_k_q8_0(int64_t n, const BlockQ2_K* w, const BlockQ8_0* a) {
  return pieces_q8_0<true, true>(n, a, [&](int64_t b, __m512i(&u)[4], PieceScales& ps) DF_AVX512 {
    const BlockQ2_K& x = w[b];
    q2_codes(x, u);
    const __m512i raw = _mm512_cvtepu8_epi32(load128(x.scales));
    split_halves(_mm512_and_si512(raw, _mm512_set1_epi32(0x0f)), h2f(x.d), ps.d0, ps.d1);
    split_halves(_mm512_srli_epi32(raw, 4), h2f(x.dmin), ps.m0, ps.m1);
    const __m256 neg = _mm256_set1_ps(-0.0f);
    ps.m0 = _mm256_xor_ps(ps.m0, neg), ps.m1 = _mm256_xor_ps(ps.m1, neg);
  });
}

DF_AVX512 float dot_iq4_xs_q8_0(int64_t n, const BlockIQ4_XS* w, const BlockQ8_0* a) {
  const __m512i table = iq4_biased_table();
  return pieces_q8_0<false, false, 7>(n, a, [&](int64_t b, __m512i(&u)[4], PieceScales& ps) DF_AVX512 {
    const BlockIQ4_XS& x = w[b];
    iq4_xs_codes(x, table, u);
    alignas(32) int32_t sc[8];
    for (int j = 0; j < 8; ++j) sc[j] = iq4_xs_scale(j, x);
    const __m256 scales = _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc)));
    ps.d0 = ps.d1 = _mm256_mul_ps(_mm256_set1_ps(h2f(x.d)), scales);
  });
}

}  // namespace df::cpu::avx512
