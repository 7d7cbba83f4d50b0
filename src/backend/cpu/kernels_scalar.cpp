// Reference kernels: the arithmetic order every SIMD table reproduces (see kernels.h).
#include <cmath>
#include <cstdlib>

#include "backend/cpu/kernels_impl.h"
#include "diskformer/backend/cpu/kernels.h"

namespace df::cpu {

namespace {

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0.0f;
    for (int i = 0; i < kQK; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int i = 0; i < kQK; ++i) y[b].qs[i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
  }
}

void to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}
void to_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

// Lane j of a block holds the products of elements 4j .. 4j + 3 (the int32 lanes of the SIMD code).
float dot_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a) {
  float l[8] = {};
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = f16_to_f32(w[b].d) * f16_to_f32(a[b].d);
    for (int j = 0; j < 8; ++j) {
      int32_t p = 0;
      for (int i = 4 * j; i < 4 * j + 4; ++i) {
        const int q = i < 16 ? (w[b].qs[i] & 0x0f) - 8 : (w[b].qs[i - 16] >> 4) - 8;
        p += q * a[b].qs[i];
      }
      l[j] = std::fma(d, float(p), l[j]);
    }
  }
  return lanes8_sum(l);
}

float dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* a) {
  float l[8] = {};
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = f16_to_f32(w[b].d) * f16_to_f32(a[b].d);
    for (int j = 0; j < 8; ++j) {
      int32_t p = 0;
      for (int i = 4 * j; i < 4 * j + 4; ++i) p += int32_t(w[b].qs[i]) * a[b].qs[i];
      l[j] = std::fma(d, float(p), l[j]);
    }
  }
  return lanes8_sum(l);
}

void dot4_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* const a[4], float out[4]) {
  for (int t = 0; t < 4; ++t) out[t] = dot_q4_0_q8_0(n, w, a[t]);
}
void dot4_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* const a[4], float out[4]) {
  for (int t = 0; t < 4; ++t) out[t] = dot_q8_0_q8_0(n, w, a[t]);
}

template <typename Load>
float lanes8_dot(int64_t n, Load load) {
  float l[8] = {};
  for (int64_t i = 0; i < n; ++i) {
    auto [w, a] = load(i);
    l[i % 8] = std::fma(w, a, l[i % 8]);
  }
  return lanes8_sum(l);
}

float dot_f16(int64_t n, const uint16_t* w, const uint16_t* a) {
  return lanes8_dot(n, [&](int64_t i) { return std::pair{f16_to_f32(w[i]), f16_to_f32(a[i])}; });
}
float dot_bf16(int64_t n, const uint16_t* w, const uint16_t* a) {
  return lanes8_dot(n, [&](int64_t i) { return std::pair{bf16_to_f32(w[i]), bf16_to_f32(a[i])}; });
}
float dot_f32(int64_t n, const float* w, const float* a) {
  return lanes8_dot(n, [&](int64_t i) { return std::pair{w[i], a[i]}; });
}

void mad_f16(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(std::fma(f16_to_f32(x[i]), v, f16_to_f32(y[i])));
}
void scale_f16(int64_t n, uint16_t* y, float v) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(f16_to_f32(y[i]) * v);
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k{
      .name = "scalar",
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
  return k;
}

const Kernels& best_kernels() {
  static const Kernels* chosen = [] {
    const char* want = std::getenv("DISKFORMER_KERNELS");
    std::string_view w = want ? want : "";
    if (w == "scalar") return &scalar_kernels();
    if (w != "avx2")
      if (const Kernels* k = avx512_kernels()) return k;
    if (const Kernels* k = avx2_kernels()) return k;
    return &scalar_kernels();
  }();
  return *chosen;
}

}  // namespace df::cpu
