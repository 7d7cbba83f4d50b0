// Device helpers shared by the kernels: number formats as the CPU backend rounds them, warp reductions.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace df::cuda::dev {

constexpr int kQK = 32;          // elements per Q4_0 / Q8_0 block
constexpr int kQ4Bytes = 18;     // f16 scale + 16 bytes of nibbles
constexpr int kQ8Bytes = 34;     // f16 scale + 32 int8

__device__ __forceinline__ float f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t f32_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }
__device__ __forceinline__ float round_f16(float f) { return __half2float(__float2half_rn(f)); }

// Round to nearest even with quiet NaNs, bit for bit as cpu::f32_to_bf16.
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 64);
  return uint16_t((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}
__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// The gated FFNs' activations, rounded as the CPU's: SiLU as cpu::swiglu (x / (1 + e^-x)); GELU as cpu::gelu, the
// tanh approximation of the input rounded to f16, its result rounded to f16 (llama.cpp's table), 0 at or below -10
// and x at or above 10.
__device__ __forceinline__ float silu(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float gelu(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  constexpr float kA = 0.044715f, kSqrt2OverPi = 0.79788456080286535587989211986876f;
  const float h = round_f16(x);
  const float t = __fmul_rn(__fmul_rn(kSqrt2OverPi, h), __fmaf_rn(__fmul_rn(kA, h), h, 1.0f));
  return round_f16(__fmul_rn(__fmul_rn(0.5f, h), __fadd_rn(1.0f, tanhf(t))));
}
// act(gate) * up as cpu::swiglu / cpu::geglu.
__device__ __forceinline__ float glu(float gate, float up, bool gelu_act) {
  if (gelu_act) return gate <= -10.0f ? 0.0f : __fmul_rn(gelu(gate), up);
  return __fmul_rn(silu(gate), up);
}

// An input's gated activation (kernels.h's InputGate) of element i of row t, as the glu and gelu kernels round it.
struct Gate {
  int act;  // 0: none, 1: SiLU, 2: GELU
  const float* mul;
  int64_t mul_stride;
};
__device__ __forceinline__ float gate_value(const Gate& g, float v, int64_t t, int64_t i) {
  if (g.act == 0) return v;
  if (g.mul == nullptr) return g.act == 2 ? gelu(v) : silu(v);
  return glu(v, g.mul[t * g.mul_stride + i], g.act == 2);
}

// Asynchronous copies into shared memory (sm_80 and later): issued without waiting, landed by the wait of their
// group. The zero-filling one writes zeros where `in` is false and reads nothing.
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(uint32_t(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async4_or_zero(void* dst, const void* src, bool in) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(uint32_t(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(in ? 4u : 0u)
               : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(uint32_t(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Every group but the latest landed.
__device__ __forceinline__ void cp_async_wait_prior() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// 4 bytes at a 2-byte aligned address (the quant blocks are 18 and 34 bytes long, so only 2-byte aligned).
__device__ __forceinline__ int load_i32_a2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return int(uint32_t(h[0]) | (uint32_t(h[1]) << 16));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Programmatic dependent launch (sm_90 and later; no-ops before). A kernel started by launch_early() may run while
// the kernel before it in the stream still does: its blocks are placed and can load what no kernel writes (weights)
// meanwhile, which hides the launch gap and the first loads' latency, the larger part of a small decode kernel's
// time. wait_prior() returns once the kernel before has finished and its writes are visible; a kernel launched early
// calls it before it reads anything an earlier kernel wrote and before it writes anything at all. allow_next() lets
// the next kernel's blocks start once every block of this one has called it (or exited).
__device__ __forceinline__ void wait_prior() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace df::cuda::dev
