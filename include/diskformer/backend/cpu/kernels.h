// The CPU backend's inner loops, one table per instruction set, chosen once at run time.
//
// Every kernel fixes its arithmetic order so that the SIMD tables give bit-identical results to scalar_kernels()
// (tests/cpu checks this), and a model's output does not depend on the machine:
//   - float dot products (f32, f16, bf16): 8 lanes, lane k accumulates elements i with i % 8 == k in index order
//     with fused multiply-adds; the lanes are summed as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7));
//   - quantized dot products: per 32-block, 8 exact integer lanes (lane j: elements 4j .. 4j+3), each accumulated as
//     l[j] = fma(d_w * d_a, float(lane), l[j]) block by block, the lanes then summed as above (ggml's x86 order);
//   - Q8_0 quantization: d = amax / 127, q = round-half-even(x * (127 / amax)), d stored as f16 (ggml's x86 code).
#pragma once

#include <cstdint>

#include "diskformer/backend/cpu/numeric.h"

namespace df::cpu {

struct Kernels {
  const char* name;  // "scalar", "avx2", "avx512"

  // Activation conversions, n elements (n % 32 == 0 for quantize_q8_0).
  void (*quantize_q8_0)(const float* x, BlockQ8_0* y, int64_t n);
  void (*to_f16)(const float* x, uint16_t* y, int64_t n);
  void (*to_bf16)(const float* x, uint16_t* y, int64_t n);

  // Dot products of n elements (n % 32 == 0 for the quantized ones).
  float (*dot_q4_0_q8_0)(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a);
  float (*dot_q8_0_q8_0)(int64_t n, const BlockQ8_0* w, const BlockQ8_0* a);
  // One weight row against four activation rows (prefill): out[t] equals dot(n, w, a[t]) bit for bit, the weight
  // row being unpacked once.
  void (*dot4_q4_0_q8_0)(int64_t n, const BlockQ4_0* w, const BlockQ8_0* const a[4], float out[4]);
  void (*dot4_q8_0_q8_0)(int64_t n, const BlockQ8_0* w, const BlockQ8_0* const a[4], float out[4]);
  float (*dot_f16)(int64_t n, const uint16_t* w, const uint16_t* a);
  float (*dot_bf16)(int64_t n, const uint16_t* w, const uint16_t* a);
  float (*dot_f32)(int64_t n, const float* w, const float* a);

  // Half-precision accumulators of attention: y[i] = f16(fma(x[i], v, y[i])) and y[i] = f16(y[i] * v).
  void (*mad_f16)(int64_t n, uint16_t* y, const uint16_t* x, float v);
  void (*scale_f16)(int64_t n, uint16_t* y, float v);
};

const Kernels& scalar_kernels();
// nullptr where the build or the CPU lacks the instructions.
const Kernels* avx2_kernels();
const Kernels* avx512_kernels();
// The widest table this CPU runs; DISKFORMER_KERNELS=scalar|avx2|avx512 picks one by hand (for measurements).
const Kernels& best_kernels();

}  // namespace df::cpu
