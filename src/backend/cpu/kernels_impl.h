// Pieces shared by the kernel tables of different instruction sets.
#pragma once

#include <string_view>
#include <utility>

#include "diskformer/backend/cpu/numeric.h"

namespace df::cpu {

// The lane reduction every float dot product ends with (kernels.h).
inline float lanes8_sum(const float l[8]) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// dot_f16_single_keys as one dot_f16_single call a key (the tables without a wider kernel).
template <float (*Dot)(int64_t, const uint16_t*, const uint16_t*)>
void keys_one_by_one(int n_keys, int64_t n, const uint16_t* k, int64_t stride, const uint16_t* a, float* out) {
  for (int j = 0; j < n_keys; ++j) out[j] = Dot(n, k + j * stride, a);
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
}  // namespace avx2
namespace avx512 {
float dot_q2_k_q8_k(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a);
float dot_q3_k_q8_k(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a);
float dot_q4_k_q8_k(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
float dot_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
void dot4_q4_k_q8_k_x8(int64_t n, const BlockQ4_K* w, const BlockQ8_K* const a[4], float out[4]);
float dot_q5_k_q8_k(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a);
float dot_q6_k_q8_k(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a);
float dot_iq4_xs_q8_k(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a);
}  // namespace avx512

}  // namespace df::cpu
