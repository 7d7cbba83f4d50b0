// Pieces shared by the kernel tables of different instruction sets.
#pragma once

#include <xmmintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "diskformer/backend/cpu/numeric.h"

namespace df::cpu {

// The lane reduction every float dot product ends with (kernels.h).
inline float lanes8_sum(const float l[8]) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// The sum of 32 lanes as a warp's butterfly reduces them (the CUDA decode products' last step): lane i plus lane
// i + 16, those pairwise by 8, 4, 2 and 1.
inline float warp_sum32(float l[32]) {
  for (int half = 16; half > 0; half /= 2)
    for (int i = 0; i < half; ++i) l[i] = l[i] + l[i + half];
  return l[0];
}

// dot_f16_single_keys as one dot_f16_single call a key (the tables without a wider kernel).
template <float (*Dot)(int64_t, const uint16_t*, const uint16_t*)>
void keys_one_by_one(int n_keys, int64_t n, const uint16_t* k, int64_t stride, const uint16_t* a, float* out) {
  for (int j = 0; j < n_keys; ++j) out[j] = Dot(n, k + j * stride, a);
}

// The eight-row kernels read eight rows block by block side by side, a pattern the hardware prefetcher does not
// follow (from DRAM the q4_0 one ran at a third of one row's speed, the Q4_K one at half): block b's step fetches the
// next eight rows' bytes of that step (8 blocks) by hand, assuming the rows are one run with w[1] - w[0] between them
// (where they are not, the addresses are merely useless). Hint: into L1 for q4_0's 3 lines a step; into L2 for Q4_K's
// 18, which into L1 ran at 9.4 GB/s against 14.8 (one core of the 2-core machine, rows from DRAM).
template <_mm_hint kHint, typename Block>
inline void prefetch_next_rows8(const Block* const w[8], int64_t b) {
  const std::ptrdiff_t stride = reinterpret_cast<const char*>(w[1]) - reinterpret_cast<const char*>(w[0]);
  const char* next = reinterpret_cast<const char*>(w[7]) + stride + b * 8 * std::ptrdiff_t(sizeof(Block));
  for (std::ptrdiff_t at = 0; at < 8 * std::ptrdiff_t(sizeof(Block)); at += 64) _mm_prefetch(next + at, kHint);
}

// Kernels::rope_rotate's loop, for every table (compiled inside each table's target, where fma is an instruction).
__attribute__((always_inline)) inline void rope_rotate_pairs(int n_heads, int head_dim, int n_rot, bool neox,
                                                             const float* cs, const float* sn, float* x) {
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + int64_t(h) * head_dim;
    for (int i = 0; i < n_rot / 2; ++i) {
      const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
      const float x0 = xh[a], x1 = xh[b];
      xh[a] = std::fma(x0, cs[i], -(x1 * sn[i]));
      xh[b] = std::fma(x0, sn[i], x1 * cs[i]);
    }
  }
}

// A one-row dot of nt activation rows as one call each (the tables without a wider kernel).
template <typename W, typename A, float (*Dot)(int64_t, const W*, const A*)>
void acts_one_by_one(int64_t n, const W* w, const A* const a[], int nt, float* out) {
  for (int t = 0; t < nt; ++t) out[t] = Dot(n, w, a[t]);
}

// dot8_q4_k_q8_k_x8 from a table's one-row entries: each row through dot4 (tokens below n_grouped, four at a time)
// and dotn (the others, up to eight at a time).
template <void (*Dot4)(int64_t, const BlockQ4_K*, const BlockQ8_K* const[4], float[4]),
          void (*DotN)(int64_t, const BlockQ4_K*, const BlockQ8_K* const[], int, float*)>
void rows8_q4_k(int64_t n, const BlockQ4_K* const w[8], const BlockQ8_K* const a[], int nt, int n_grouped,
                float* out) {
  for (int i = 0; i < 8; ++i) {
    float o[4];
    int t = 0;
    for (; t + 4 <= n_grouped; t += 4) {
      Dot4(n, w[i], a + t, o);
      for (int k = 0; k < 4; ++k) out[(t + k) * 8 + i] = o[k];
    }
    for (; t < nt; t += 8) {
      const int m = nt - t < 8 ? nt - t : 8;
      float on[8];
      DotN(n, w[i], a + t, m, on);
      for (int k = 0; k < m; ++k) out[(t + k) * 8 + i] = on[k];
    }
  }
}

// The K-quant entries of each table (kernels_kquant_*.cpp), joined into the tables by kernels_*.cpp (the AVX-512
// table takes the AVX2 Q8_K quantization).
namespace scalar {
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n);
float dot_q2_k_q8_k(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a);
float dot_q3_k_q8_k(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a);
float dot_q4_k_q8_k(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
float dot_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
void dot4_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* const a[4], float out[4]);
float dot_q5_k_q8_k(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a);
float dot_q6_k_q8_k(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a);
float dot_iq4_xs_q8_k(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a);
float dot_q2_k_q8_0(int64_t n, const BlockQ2_K* w, const BlockQ8_0* a);
float dot_q3_k_q8_0(int64_t n, const BlockQ3_K* w, const BlockQ8_0* a);
float dot_q4_k_q8_0(int64_t n, const BlockQ4_K* w, const BlockQ8_0* a);
float dot_q5_k_q8_0(int64_t n, const BlockQ5_K* w, const BlockQ8_0* a);
float dot_q6_k_q8_0(int64_t n, const BlockQ6_K* w, const BlockQ8_0* a);
float dot_iq4_xs_q8_0(int64_t n, const BlockIQ4_XS* w, const BlockQ8_0* a);
}  // namespace scalar
namespace avx2 {
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n);
float dot_q2_k_q8_k(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a);
float dot_q3_k_q8_k(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a);
float dot_q4_k_q8_k(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
float dot_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
void dot4_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* const a[4], float out[4]);
float dot_q5_k_q8_k(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a);
float dot_q6_k_q8_k(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a);
float dot_iq4_xs_q8_k(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a);
float dot_q2_k_q8_0(int64_t n, const BlockQ2_K* w, const BlockQ8_0* a);
float dot_q3_k_q8_0(int64_t n, const BlockQ3_K* w, const BlockQ8_0* a);
float dot_q4_k_q8_0(int64_t n, const BlockQ4_K* w, const BlockQ8_0* a);
float dot_q5_k_q8_0(int64_t n, const BlockQ5_K* w, const BlockQ8_0* a);
float dot_q6_k_q8_0(int64_t n, const BlockQ6_K* w, const BlockQ8_0* a);
float dot_iq4_xs_q8_0(int64_t n, const BlockIQ4_XS* w, const BlockQ8_0* a);
}  // namespace avx2
namespace avx512 {
float dot_q2_k_q8_k(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a);
float dot_q3_k_q8_k(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a);
float dot_q4_k_q8_k(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
float dot_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
void dot8_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* const w[8], const BlockQ8_K* const a[], int nt, int n_grouped,
                       float* out);
float dot_q5_k_q8_k(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a);
void dotn_q2_k_q8_k(int64_t n, const BlockQ2_K* w, const BlockQ8_K* const a[], int nt, float* out);
void dotn_q3_k_q8_k(int64_t n, const BlockQ3_K* w, const BlockQ8_K* const a[], int nt, float* out);
void dotn_q5_k_q8_k(int64_t n, const BlockQ5_K* w, const BlockQ8_K* const a[], int nt, float* out);
float dot_q6_k_q8_k(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a);
void dotn_q6_k_q8_k(int64_t n, const BlockQ6_K* w, const BlockQ8_K* const a[], int nt, float* out);
void dotn_iq4_xs_q8_k(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* const a[], int nt, float* out);
float dot_iq4_xs_q8_k(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a);
float dot_q2_k_q8_0(int64_t n, const BlockQ2_K* w, const BlockQ8_0* a);
float dot_q3_k_q8_0(int64_t n, const BlockQ3_K* w, const BlockQ8_0* a);
float dot_q4_k_q8_0(int64_t n, const BlockQ4_K* w, const BlockQ8_0* a);
float dot_q5_k_q8_0(int64_t n, const BlockQ5_K* w, const BlockQ8_0* a);
float dot_q6_k_q8_0(int64_t n, const BlockQ6_K* w, const BlockQ8_0* a);
float dot_iq4_xs_q8_0(int64_t n, const BlockIQ4_XS* w, const BlockQ8_0* a);
}  // namespace avx512

}  // namespace df::cpu
