// GELU as llama.cpp's CPU backend rounds it: the tanh approximation evaluated once per f16 input into a table of
// f16 results; an f32 input is rounded to f16, looked up and widened, except beyond +-10 (0 below, x above).
#include <array>
#include <cmath>

#include "diskformer/backend/cpu/numeric.h"
#include "diskformer/backend/cpu/ops.h"

namespace df::cpu {

namespace {

// 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) in f32 with libm's tanhf, as ggml's table is built; its build
// contracts 1 + (0.044715 x) x into one fused multiply-add (checked against its table: all 65,536 entries equal).
float gelu_f32(float x) {
  constexpr float kA = 0.044715f, kSqrt2OverPi = 0.79788456080286535587989211986876f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * std::fma(kA * x, x, 1.0f)));
}

// Built once, read-only after: the function-local static is initialized thread-safely on first use.
const std::array<uint16_t, 65536>& gelu_table() {
  static const std::array<uint16_t, 65536> table = [] {
    std::array<uint16_t, 65536> t{};
    for (uint32_t i = 0; i < t.size(); ++i) t[i] = f32_to_f16(gelu_f32(f16_to_f32(uint16_t(i))));
    return t;
  }();
  return table;
}

inline float gelu_lookup(const std::array<uint16_t, 65536>& t, float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return f16_to_f32(t[f32_to_f16(x)]);
}

}  // namespace

void gelu(const float* x, int64_t n, float* y) {
  const auto& t = gelu_table();
  for (int64_t i = 0; i < n; ++i) y[i] = gelu_lookup(t, x[i]);
}

void geglu(const float* gate, const float* up, int64_t n, float* y) {
  const auto& t = gelu_table();
  for (int64_t i = 0; i < n; ++i) y[i] = gate[i] <= -10.0f ? 0.0f : gelu_lookup(t, gate[i]) * up[i];
}

void geglu(Context& ctx, const float* gate, const float* up, int64_t n, float* y) {
  ctx.for_ranges(n, 1, kElementGrain, [&](int64_t i0, int64_t i1) { geglu(gate + i0, up + i0, i1 - i0, y + i0); });
}

}  // namespace df::cpu
