// The CPU backend's inner loops, one table per instruction set, chosen once at run time.
//
// Every kernel fixes its arithmetic order so that the SIMD tables give bit-identical results to scalar_kernels()
// (tests/cpu checks this), and a model's output does not depend on the machine. The orders are those of llama.cpp's
// CPU backend built for AVX2 on x86 (its vec_dot, tinyBLAS and interleaved-matrix kernels), so that a product here
// equals llama.cpp's bit for bit:
//   - float dot products (f32, f16, bf16): 8 lanes, lane k accumulates elements i with i % 8 == k in index order
//     with fused multiply-adds; the lanes are summed as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) (tinyBLAS, which
//     llama.cpp uses for f32/f16 products of several activation rows). The _single orders are its vector routines
//     for one row (ggml_vec_dot_f32/f16): 4 sets of 8 lanes over 32-element steps (set j: elements 32i + 8j + k),
//     added (s0+s2)+(s1+s3) lane by lane, summed ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)); the elements past the last
//     whole step are then added one by one (f32: s + w * a, rounded twice; f16: in double);
//   - quantized dot products: per 32-block, 8 exact integer lanes (lane j: elements 4j .. 4j+3), each accumulated as
//     l[j] = fma(d_w * d_a, float(lane), l[j]) block by block, the lanes then summed as above (ggml's x86 order);
//     Q5_0 exactly so; IQ4_NL keeps even and odd blocks in two lane sets, added lane by lane at the end, an odd last
//     block joining as s = fma(d, float(isum), s) (its vec_dot; the _batch order is the one lane set, as tinyBLAS
//     takes IQ4_NL matrices that are not interleaved in products of several activation rows); Q4_1 and Q5_1 add
//     their offsets apart, s_m = fma(m_w, s_a, s_m) block by block, returning lanes + s_m;
//   - K-quant and IQ4_XS dot products: per 256-block, 8 exact integer lanes (lane k: elements e with e % 32 in
//     4k .. 4k+3, each product times its sub-block scale), then l[k] = fma(d_w * d_a, float(lane k), l[k]); the
//     mins of Q2_K enter first as lanes of their own (lane k: sub-blocks 2k, 2k+1), Q6_K's -32 offset is a lane
//     term of sub-blocks 2k, 2k+1 as well; Q4_K keeps its mins in 4 float lanes (lane k: sub-blocks 2k, 2k+1),
//     summed (m0+m2)+(m1+m3) and added to the 8-lane sum; Q5_K keeps them in one float, s_m = fma(-d_a * dmin_w,
//     float(min sum), s_m), added likewise;
//   - the _x8 dot products are the orders of llama.cpp's kernels for matrices it interleaves 8 rows at a time
//     (Q4_0, IQ4_NL and Q4_K weights whose row count is a multiple of 8): one exact integer sum per block (Q4_K:
//     per 256-block, its scales and its mins apart), s = fma(float(isum), d_w * d_a, s) block by block (Q4_K: the
//     mins likewise with dmin_w, s - s_m at the end);
//   - Q8_0 quantization: d = amax / 127, q = round-half-even(x * (127 / amax)), d stored as f16 (ggml's x86 code);
//     Q8_1 the same plus s = f16(d * sum(q)); Q8_K (256 values): with max the first value of largest magnitude,
//     q = min(127, round-half-even(x * (-127 / max))), d = 1 / (-127 / max) in f32, bsums the 16-value sums.
#pragma once

#include <cstdint>

#include "diskformer/backend/cpu/numeric.h"

namespace df::cpu {

constexpr int kQ4KTileTokens = 64;  // dot8_q4_k_q8_k_x8's most activation rows a call

struct Kernels {
  const char* name;  // "scalar", "avx2", "avx512"

  // Activation conversions, n elements (n % 32 == 0 for quantize_q8_0 and quantize_q8_1, n % 256 for q8_k).
  void (*quantize_q8_0)(const float* x, BlockQ8_0* y, int64_t n);
  void (*quantize_q8_1)(const float* x, BlockQ8_1* y, int64_t n);
  void (*quantize_q8_k)(const float* x, BlockQ8_K* y, int64_t n);
  void (*to_f16)(const float* x, uint16_t* y, int64_t n);
  void (*to_bf16)(const float* x, uint16_t* y, int64_t n);

  // Dot products of n elements (n % 32 == 0 for the quantized ones).
  float (*dot_q4_0_q8_0)(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a);
  float (*dot_q8_0_q8_0)(int64_t n, const BlockQ8_0* w, const BlockQ8_0* a);
  float (*dot_q4_1_q8_1)(int64_t n, const BlockQ4_1* w, const BlockQ8_1* a);
  float (*dot_q5_0_q8_0)(int64_t n, const BlockQ5_0* w, const BlockQ8_0* a);
  float (*dot_q5_1_q8_1)(int64_t n, const BlockQ5_1* w, const BlockQ8_1* a);
  float (*dot_iq4_nl_q8_0)(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a);
  float (*dot_iq4_nl_q8_0_batch)(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a);
  // n % 256 == 0.
  float (*dot_q2_k_q8_k)(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a);
  float (*dot_q3_k_q8_k)(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a);
  float (*dot_q4_k_q8_k)(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
  float (*dot_q5_k_q8_k)(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a);
  float (*dot_q6_k_q8_k)(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a);
  float (*dot_iq4_xs_q8_k)(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a);
  // One weight row against four activation rows (prefill): out[t] equals dot(n, w, a[t]) bit for bit, the weight
  // row being unpacked once.
  void (*dot4_q4_0_q8_0)(int64_t n, const BlockQ4_0* w, const BlockQ8_0* const a[4], float out[4]);
  void (*dot4_q8_0_q8_0)(int64_t n, const BlockQ8_0* w, const BlockQ8_0* const a[4], float out[4]);
  float (*dot_f16)(int64_t n, const uint16_t* w, const uint16_t* a);
  float (*dot_bf16)(int64_t n, const uint16_t* w, const uint16_t* a);
  float (*dot_f32)(int64_t n, const float* w, const float* a);
  float (*dot_f32_single)(int64_t n, const float* w, const float* a);
  // dot_f32_single's order on halves (ggml_vec_dot_f16), its tail summed in double: attention's scores, and f16
  // products with one activation row.
  float (*dot_f16_single)(int64_t n, const uint16_t* w, const uint16_t* a);
  // dot_f16_single of up to 8 keys (key j at k + j * stride) with one row a: out[j] bit for bit
  // dot_f16_single(n, k + j * stride, a). One query's attention scores its keys eight at a time, side by side.
  void (*dot_f16_single_keys)(int n_keys, int64_t n, const uint16_t* k, int64_t stride, const uint16_t* a,
                              float* out);
  // bf16 products with one activation row (ggml_vec_dot_bf16): dot_f32_single's steps, the lanes then summed as
  // the 8-lane orders are, and its tail summed in double.
  float (*dot_bf16_single)(int64_t n, const uint16_t* w, const uint16_t* a);
  // The interleaved-matrix orders (above).
  float (*dot_q4_0_q8_0_x8)(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a);
  // Eight weight rows against nt (1 to 8) activation rows: out[t * 8 + i] equals dot_q4_0_q8_0_x8(n, w[i], a[t]) bit
  // for bit. Each weight block is unpacked once for all nt rows and the eight rows' sums sit in the lanes of one
  // vector, so the block-by-block multiply-adds of eight rows run side by side instead of one serial chain each.
  void (*dot8_q4_0_q8_0_x8)(int64_t n, const BlockQ4_0* const w[8], const BlockQ8_0* const a[], int nt, float* out);
  float (*dot_iq4_nl_q8_0_x8)(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a);
  float (*dot_q4_k_q8_k_x8)(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
  // Four activation rows against one Q4_K row in the order of llama.cpp's batched 8-row kernel (gemm): as the x8
  // order, but one fused multiply-add per 64 elements (two sub-blocks) instead of per 256.
  void (*dot4_q4_k_q8_k_x8)(int64_t n, const BlockQ4_K* w, const BlockQ8_K* const a[4], float out[4]);
  // Eight Q4_K rows against nt (1 to kQ4KTileTokens) activation rows: out[t * 8 + i] equals, bit for bit,
  // dot4_q4_k_q8_k_x8's result of row i and activation row t for t < n_grouped (a multiple of 4: the batched order),
  // and dot_q4_k_q8_k_x8(n, w[i], a[t]) for the others (the one-row order). The eight rows' sums sit in the lanes of
  // one vector, so their integer sums need one reduction for eight rows and their multiply-adds run side by side,
  // and each weight block is unpacked once for all nt activation rows.
  void (*dot8_q4_k_q8_k_x8)(int64_t n, const BlockQ4_K* const w[8], const BlockQ8_K* const a[], int nt, int n_grouped,
                            float* out);
  // dot_q2_k_q8_k, dot_q3_k_q8_k, dot_q5_k_q8_k and dot_iq4_xs_q8_k of one row with nt (<= 8) activation rows:
  // out[t] bit for bit the one-row product with a[t], the row's codes, scales and mins unpacked once for all of them
  // (Q2_K, Q3_K_M, Q5_K_M and IQ4_XS models' matrices in a prompt batch).
  void (*dotn_q2_k_q8_k)(int64_t n, const BlockQ2_K* w, const BlockQ8_K* const a[], int nt, float* out);
  void (*dotn_q3_k_q8_k)(int64_t n, const BlockQ3_K* w, const BlockQ8_K* const a[], int nt, float* out);
  void (*dotn_q5_k_q8_k)(int64_t n, const BlockQ5_K* w, const BlockQ8_K* const a[], int nt, float* out);
  void (*dotn_iq4_xs_q8_k)(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* const a[], int nt, float* out);
  // dot_q6_k_q8_k of one row with nt (<= 8) activation rows: out[t] bit for bit dot_q6_k_q8_k(n, w, a[t]), the
  // row's codes and scales unpacked once for all of them (a Q4_K_M model's Q6_K matrices in a prompt batch).
  void (*dotn_q6_k_q8_k)(int64_t n, const BlockQ6_K* w, const BlockQ8_K* const a[], int nt, float* out);

  // The 256-element types against Q8_0 activation blocks in the order of the CUDA backend's decode products
  // (cuda/decode.cu rows_dots, cuda/kquant.cuh piece_dot), so that the CPU's share of a GPU run's routed experts
  // rounds as the GPU's own products do. Each 32-element piece p of the row (sub-block p % 8 of super-block p / 8)
  // has per-half scales d0, d1 and offsets m0, m1 (f32 products of the block's scale and the piece's integer scale,
  // the offsets negated), exact integer dots p0, p1 of its halves' codes with the activation's and the halves'
  // activation code sums s0, s1; s = d0 * float(p0 + p1), then fma(m0, float(s0 + s1), s) for Q4_K and Q5_K, and
  // s = fma(d1, float(p1), d0 * float(p0)), then for Q2_K fma(m1, float(s1), fma(m0, float(s0), s)), for the per-16
  // scaled Q2_K, Q3_K and Q6_K. Lane p % 32 of 32 accumulates l = fma(d_a, s, l) over its pieces in order; the
  // lanes are then summed as a warp's butterfly: lane i + lane i + 16, those pairwise by 8, 4, 2 and 1.
  float (*dot_q2_k_q8_0)(int64_t n, const BlockQ2_K* w, const BlockQ8_0* a);
  float (*dot_q3_k_q8_0)(int64_t n, const BlockQ3_K* w, const BlockQ8_0* a);
  float (*dot_q4_k_q8_0)(int64_t n, const BlockQ4_K* w, const BlockQ8_0* a);
  float (*dot_q5_k_q8_0)(int64_t n, const BlockQ5_K* w, const BlockQ8_0* a);
  float (*dot_q6_k_q8_0)(int64_t n, const BlockQ6_K* w, const BlockQ8_0* a);
  float (*dot_iq4_xs_q8_0)(int64_t n, const BlockIQ4_XS* w, const BlockQ8_0* a);

  // y[i] = silu(gate[i]) * up[i] over one row of n: as llama.cpp's SIMD SwiGLU, 8-element steps take the
  // exponential of exp_approx.h, the last n % 8 elements libm's expf.
  void (*swiglu)(int64_t n, const float* gate, const float* up, float* y);
  // y[i] = silu(x[i]) over one row of n, in swiglu's order (llama.cpp's SIMD SiLU).
  void (*silu)(int64_t n, const float* x, float* y);
  // y[i] = exp_approx_f32(x[i] - m) for n a multiple of 8 (y may be x): the exponentials of llama.cpp's SIMD softmax
  // and tiled attention.
  void (*exp_shifted)(int64_t n, const float* x, float m, float* y);
  // y[i] = fma(x[i], v, y[i]) (ggml_vec_mad_f32): the delta rule's rank-one updates of its state.
  void (*mad_f32)(int64_t n, float* y, const float* x, float v);
  // y[i] = fma(y[i], sy, x[i] * sx): one step of merging attention partials over chunks of cells (ggml's merge of
  // its per-thread chunks, whose build fuses the first product of each sum).
  void (*merge_f32)(int64_t n, float* y, float sy, const float* x, float sx);

  // The tiled attention of batches (llama.cpp's kernel for 64 queries or more), f32 throughout: scores of n keys (key j
  // at k + j * stride), out[j] = the fused multiply-adds of f32(k_j[d]) * q[d] for d in order from 0; and the
  // weighted values, acc[d] = fma(p[j], f32(v_j[d]), acc[d]) for j in order. The SIMD tables keep each key's or each
  // element's chain in a lane of its own.
  void (*tile_scores_f16)(int64_t n, int64_t dim, const uint16_t* k, int64_t stride, const float* q, float* out);
  void (*tile_accumulate_f16)(int64_t n, int64_t dim, const uint16_t* v, int64_t stride, const float* p, float* acc);

  // RoPE's rotation of the first n_rot dimensions of n_heads heads of head_dim floats by the pairs' cos and sin
  // (pairs (2i, 2i + 1), or (i, i + n_rot / 2) for neox): x_a = fma(x_a, cos, -(x_b * sin)), x_b = fma(x_a, sin,
  // x_b * cos), the products fused as llama.cpp's build fuses them. The same in every table; the SIMD ones have
  // the fused multiply-add as an instruction rather than a library call.
  void (*rope_rotate)(int n_heads, int head_dim, int n_rot, bool neox, const float* cs, const float* sn, float* x);

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
