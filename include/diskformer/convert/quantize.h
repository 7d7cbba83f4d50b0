// ggml's reference quantizers (quantize_row_q8_0_ref, quantize_row_q4_0_ref) and their inverses, so that a file
// written here holds the same bytes llama.cpp's own conversion would write for the same float weights.
//
// Block layouts (32 elements each):
//   Q8_0: f16 d, int8 q[32]           x[i] = d * q[i]
//   Q4_0: f16 d, uint8 qs[16]         x[j] = d * ((qs[j] & 15) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8)
#pragma once

#include <cstdint>
#include <span>

#include "diskformer/gguf/types.h"
#include "diskformer/util/result.h"

namespace df::convert {

inline constexpr int64_t kBlockElems = 32;
inline constexpr int64_t kQ8_0BlockBytes = 34;
inline constexpr int64_t kQ4_0BlockBytes = 18;

// IEEE half precision, round to nearest even (what F16C's _cvtss_sh does for ggml on x86).
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t h);

// n must be a multiple of 32; out holds n / 32 blocks.
void quantize_q8_0(const float* x, int64_t n, uint8_t* out);
void quantize_q4_0(const float* x, int64_t n, uint8_t* out);
void dequantize_q8_0(const uint8_t* in, int64_t n, float* x);
void dequantize_q4_0(const uint8_t* in, int64_t n, float* x);

// Encodes n floats as F32, F16, Q8_0 or Q4_0 into out (gguf::row_bytes(type, n) bytes); other types are refused.
Status encode(gguf::GgmlType type, std::span<const float> x, uint8_t* out);

}  // namespace df::convert
