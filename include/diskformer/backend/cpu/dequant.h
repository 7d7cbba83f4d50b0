// Weight rows back to floats: embedding rows (get_row) and the plain references of the kernel tests.
#pragma once

#include <cstdint>

#include "diskformer/gguf/types.h"

namespace df::cpu {

// Types dequantize_row converts: f32, f16, bf16 and every quantized type the CPU kernels multiply.
bool dequant_supported(gguf::GgmlType t);

// n elements (a whole number of t's blocks) of a row of type t. Each value is computed as ggml's
// dequantize_row_* functions compute it, a multiply then an add in float (ggml's base library is built without
// fused multiply-adds), so that an embedding row equals llama.cpp's bit for bit.
void dequantize_row(gguf::GgmlType t, const uint8_t* row, int64_t n, float* out);

}  // namespace df::cpu
