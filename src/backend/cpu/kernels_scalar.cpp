// Reference kernels: the arithmetic order every SIMD table reproduces (see kernels.h).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/exp_approx.h"
#include "backend/cpu/kernels_impl.h"
#include "diskformer/backend/cpu/kernels.h"

namespace df::cpu {

namespace {

// One 32-block of activations to codes; returns the unrounded scale amax / 127.
float quantize_block(const float* xb, int8_t* qs) {
  float amax = 0.0f;
  for (int i = 0; i < kQK; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < kQK; ++i) qs[i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
  return amax / 127.0f;
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) y[b].d = f32_to_f16(quantize_block(x + b * kQK, y[b].qs));
}

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = quantize_block(x + b * kQK, y[b].qs);
    int sum = 0;
    for (int i = 0; i < kQK; ++i) sum += y[b].qs[i];
    y[b].d = f32_to_f16(d);
    y[b].s = f32_to_f16(d * float(sum));
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

// The 5-bit code of element i of a Q5_0 / Q5_1 block (0..31).
inline int q5_code(const uint8_t* qs, const uint8_t* qh, int i) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const int lo = i < 16 ? qs[i] & 0x0f : qs[i - 16] >> 4;
  return lo | int((h >> i) & 1) << 4;
}

// Lanes of one 32-block (lane j: elements 4j .. 4j+3) for integer codes q(i) against activation codes a.
template <typename Code>
void block_lanes(Code q, const int8_t* a, int32_t p[8]) {
  for (int j = 0; j < 8; ++j) {
    p[j] = 0;
    for (int i = 4 * j; i < 4 * j + 4; ++i) p[j] += q(i) * a[i];
  }
}

float dot_q4_1_q8_1(int64_t n, const BlockQ4_1* w, const BlockQ8_1* a) {
  float l[8] = {}, sm = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    sm = std::fma(f16_to_f32(w[b].m), f16_to_f32(a[b].s), sm);
    const float d = f16_to_f32(w[b].d) * f16_to_f32(a[b].d);
    int32_t p[8];
    block_lanes([&](int i) { return i < 16 ? w[b].qs[i] & 0x0f : w[b].qs[i - 16] >> 4; }, a[b].qs, p);
    for (int j = 0; j < 8; ++j) l[j] = std::fma(d, float(p[j]), l[j]);
  }
  return lanes8_sum(l) + sm;
}

float dot_q5_0_q8_0(int64_t n, const BlockQ5_0* w, const BlockQ8_0* a) {
  float l[8] = {};
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = f16_to_f32(w[b].d) * f16_to_f32(a[b].d);
    int32_t p[8];
    block_lanes([&](int i) { return q5_code(w[b].qs, w[b].qh, i) - 16; }, a[b].qs, p);
    for (int j = 0; j < 8; ++j) l[j] = std::fma(d, float(p[j]), l[j]);
  }
  return lanes8_sum(l);
}

float dot_q5_1_q8_1(int64_t n, const BlockQ5_1* w, const BlockQ8_1* a) {
  float l[8] = {}, sm = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    sm = std::fma(f16_to_f32(w[b].m), f16_to_f32(a[b].s), sm);
    const float d = f16_to_f32(w[b].d) * f16_to_f32(a[b].d);
    int32_t p[8];
    block_lanes([&](int i) { return q5_code(w[b].qs, w[b].qh, i); }, a[b].qs, p);
    for (int j = 0; j < 8; ++j) l[j] = std::fma(d, float(p[j]), l[j]);
  }
  return lanes8_sum(l) + sm;
}

float dot_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a) {
  const int64_t nb = n / kQK;
  float even[8] = {}, odd[8] = {};
  int64_t b = 0;
  for (; b + 1 < nb; b += 2)
    for (int64_t bb = b; bb < b + 2; ++bb) {
      const float d = f16_to_f32(a[bb].d) * f16_to_f32(w[bb].d);
      int32_t p[8];
      block_lanes([&](int i) { return kIQ4NLValues[i < 16 ? w[bb].qs[i] & 0x0f : w[bb].qs[i - 16] >> 4]; }, a[bb].qs,
                  p);
      float* l = bb == b ? even : odd;
      for (int j = 0; j < 8; ++j) l[j] = std::fma(d, float(p[j]), l[j]);
    }
  float l[8];
  for (int j = 0; j < 8; ++j) l[j] = even[j] + odd[j];
  float sum = lanes8_sum(l);
  if (b < nb) {
    int32_t isum = 0;
    for (int i = 0; i < kQK; ++i) isum += kIQ4NLValues[i < 16 ? w[b].qs[i] & 0x0f : w[b].qs[i - 16] >> 4] * a[b].qs[i];
    sum = std::fma(f16_to_f32(a[b].d) * f16_to_f32(w[b].d), float(isum), sum);
  }
  return sum;
}

float dot_iq4_nl_q8_0_batch(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a) {
  float l[8] = {};
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = f16_to_f32(w[b].d) * f16_to_f32(a[b].d);
    int32_t p[8];
    block_lanes([&](int i) { return kIQ4NLValues[i < 16 ? w[b].qs[i] & 0x0f : w[b].qs[i - 16] >> 4]; }, a[b].qs, p);
    for (int j = 0; j < 8; ++j) l[j] = std::fma(d, float(p[j]), l[j]);
  }
  return lanes8_sum(l);
}

// The interleaved-matrix order: one exact sum per block, one fused multiply-add per block.
template <typename Block, typename Code>
float dot_x8(int64_t n, const Block* w, const BlockQ8_0* a, Code code) {
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32_t isum = 0;
    for (int i = 0; i < kQK; ++i) isum += code(w[b], i) * a[b].qs[i];
    s = std::fma(float(isum), f16_to_f32(w[b].d) * f16_to_f32(a[b].d), s);
  }
  return s;
}

float dot_q4_0_q8_0_x8(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a) {
  return dot_x8(n, w, a, [](const BlockQ4_0& x, int i) { return (i < 16 ? x.qs[i] & 0x0f : x.qs[i - 16] >> 4) - 8; });
}

void dot8_q4_0_q8_0_x8(int64_t n, const BlockQ4_0* const w[8], const BlockQ8_0* const a[], int nt, float* out) {
  for (int t = 0; t < nt; ++t)
    for (int i = 0; i < 8; ++i) out[t * 8 + i] = dot_q4_0_q8_0_x8(n, w[i], a[t]);
}

float dot_iq4_nl_q8_0_x8(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a) {
  return dot_x8(n, w, a, [](const BlockIQ4_NL& x, int i) {
    return int(kIQ4NLValues[i < 16 ? x.qs[i] & 0x0f : x.qs[i - 16] >> 4]);
  });
}

// The whole 32-element steps of dot_f32_single's order, values loaded by load(i); `lanes` sums the 8 lanes.
template <typename Load>
float single_steps(int64_t whole, Load load, float (*lanes)(const float*)) {
  float l[4][8] = {};
  for (int64_t i = 0; i < whole; ++i) {
    auto [w, a] = load(i);
    float& acc = l[i % 32 / 8][i % 8];
    acc = std::fma(w, a, acc);
  }
  float s[8];
  for (int k = 0; k < 8; ++k) s[k] = (l[0][k] + l[2][k]) + (l[1][k] + l[3][k]);
  return lanes(s);
}

float single_lanes_sum(const float* s) { return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])); }
template <typename Load>
float single_steps(int64_t whole, Load load) {
  return single_steps(whole, load, single_lanes_sum);
}

float dot_f32_single(int64_t n, const float* w, const float* a) {
  const int64_t whole = n / 32 * 32;
  float sum = single_steps(whole, [&](int64_t i) { return std::pair{w[i], a[i]}; });
  for (int64_t i = whole; i < n; ++i) sum += w[i] * a[i];
  return sum;
}

float dot_f16_single(int64_t n, const uint16_t* w, const uint16_t* a) {
  const int64_t whole = n / 32 * 32;
  double sum = single_steps(whole, [&](int64_t i) { return std::pair{f16_to_f32(w[i]), f16_to_f32(a[i])}; });
  for (int64_t i = whole; i < n; ++i) sum += double(f16_to_f32(w[i]) * f16_to_f32(a[i]));
  return float(sum);
}

float dot_bf16_single(int64_t n, const uint16_t* w, const uint16_t* a) {
  const int64_t whole = n / 32 * 32;
  double sum = single_steps(
      whole, [&](int64_t i) { return std::pair{bf16_to_f32(w[i]), bf16_to_f32(a[i])}; },
      [](const float* s) { return lanes8_sum(s); });
  for (int64_t i = whole; i < n; ++i) sum += double(bf16_to_f32(w[i]) * bf16_to_f32(a[i]));
  return float(sum);
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

void swiglu(int64_t n, const float* gate, const float* up, float* y) {
  const int64_t whole = n / 8 * 8;
  for (int64_t i = 0; i < whole; ++i) y[i] = gate[i] / (1.0f + exp_approx_f32(0.0f - gate[i])) * up[i];
  for (int64_t i = whole; i < n; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void silu(int64_t n, const float* x, float* y) {
  const int64_t whole = n / 8 * 8;
  for (int64_t i = 0; i < whole; ++i) y[i] = x[i] / (1.0f + exp_approx_f32(0.0f - x[i]));
  for (int64_t i = whole; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void exp_shifted(int64_t n, const float* x, float m, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_approx_f32(x[i] - m);
}

void mad_f32(int64_t n, float* y, const float* x, float v) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(x[i], v, y[i]);
}

void merge_f32(int64_t n, float* y, float sy, const float* x, float sx) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(y[i], sy, x[i] * sx);
}

void tile_scores_f16(int64_t n, int64_t dim, const uint16_t* k, int64_t stride, const float* q, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    float s = 0.0f;
    for (int64_t d = 0; d < dim; ++d) s = std::fma(f16_to_f32(k[j * stride + d]), q[d], s);
    out[j] = s;
  }
}

void tile_accumulate_f16(int64_t n, int64_t dim, const uint16_t* v, int64_t stride, const float* p, float* acc) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < dim; ++d) acc[d] = std::fma(p[j], f16_to_f32(v[j * stride + d]), acc[d]);
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
      .quantize_q8_1 = quantize_q8_1,
      .quantize_q8_k = scalar::quantize_q8_k,
      .to_f16 = to_f16,
      .to_bf16 = to_bf16,
      .dot_q4_0_q8_0 = dot_q4_0_q8_0,
      .dot_q8_0_q8_0 = dot_q8_0_q8_0,
      .dot_q4_1_q8_1 = dot_q4_1_q8_1,
      .dot_q5_0_q8_0 = dot_q5_0_q8_0,
      .dot_q5_1_q8_1 = dot_q5_1_q8_1,
      .dot_iq4_nl_q8_0 = dot_iq4_nl_q8_0,
      .dot_iq4_nl_q8_0_batch = dot_iq4_nl_q8_0_batch,
      .dot_q2_k_q8_k = scalar::dot_q2_k_q8_k,
      .dot_q3_k_q8_k = scalar::dot_q3_k_q8_k,
      .dot_q4_k_q8_k = scalar::dot_q4_k_q8_k,
      .dot_q5_k_q8_k = scalar::dot_q5_k_q8_k,
      .dot_q6_k_q8_k = scalar::dot_q6_k_q8_k,
      .dot_iq4_xs_q8_k = scalar::dot_iq4_xs_q8_k,
      .dot4_q4_0_q8_0 = dot4_q4_0_q8_0,
      .dot4_q8_0_q8_0 = dot4_q8_0_q8_0,
      .dot_f16 = dot_f16,
      .dot_bf16 = dot_bf16,
      .dot_f32 = dot_f32,
      .dot_f32_single = dot_f32_single,
      .dot_f16_single = dot_f16_single,
      .dot_f16_single_keys = keys_one_by_one<dot_f16_single>,
      .dot_bf16_single = dot_bf16_single,
      .dot_q4_0_q8_0_x8 = dot_q4_0_q8_0_x8,
      .dot8_q4_0_q8_0_x8 = dot8_q4_0_q8_0_x8,
      .dot_iq4_nl_q8_0_x8 = dot_iq4_nl_q8_0_x8,
      .dot_q4_k_q8_k_x8 = scalar::dot_q4_k_q8_k_x8,
      .dot4_q4_k_q8_k_x8 = scalar::dot4_q4_k_q8_k_x8,
      .dot8_q4_k_q8_k_x8 =
          rows8_q4_k<scalar::dot4_q4_k_q8_k_x8, acts_one_by_one<BlockQ4_K, BlockQ8_K, scalar::dot_q4_k_q8_k_x8>>,
      .dotn_q2_k_q8_k = acts_one_by_one<BlockQ2_K, BlockQ8_K, scalar::dot_q2_k_q8_k>,
      .dotn_q3_k_q8_k = acts_one_by_one<BlockQ3_K, BlockQ8_K, scalar::dot_q3_k_q8_k>,
      .dotn_q5_k_q8_k = acts_one_by_one<BlockQ5_K, BlockQ8_K, scalar::dot_q5_k_q8_k>,
      .dotn_iq4_xs_q8_k = acts_one_by_one<BlockIQ4_XS, BlockQ8_K, scalar::dot_iq4_xs_q8_k>,
      .dotn_q6_k_q8_k = acts_one_by_one<BlockQ6_K, BlockQ8_K, scalar::dot_q6_k_q8_k>,
      .dot_q2_k_q8_0 = scalar::dot_q2_k_q8_0,
      .dot_q3_k_q8_0 = scalar::dot_q3_k_q8_0,
      .dot_q4_k_q8_0 = scalar::dot_q4_k_q8_0,
      .dot_q5_k_q8_0 = scalar::dot_q5_k_q8_0,
      .dot_q6_k_q8_0 = scalar::dot_q6_k_q8_0,
      .dot_iq4_xs_q8_0 = scalar::dot_iq4_xs_q8_0,
      .swiglu = swiglu,
      .silu = silu,
      .exp_shifted = exp_shifted,
      .mad_f32 = mad_f32,
      .merge_f32 = merge_f32,
      .tile_scores_f16 = tile_scores_f16,
      .tile_accumulate_f16 = tile_accumulate_f16,
      .rope_rotate = rope_rotate_pairs,
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
