// The operations of a Gated DeltaNet layer on the CPU, each rounded as llama.cpp's CPU backend rounds it (ggml-cpu's
// ssm_conv, l2_norm, unary ops and its fused gated_delta_net op), and the elementwise functions around them.
#pragma once

#include <cmath>
#include <cstdint>

#include "diskformer/backend/cpu/ops.h"

namespace df::cpu {

// The elementwise functions of ggml's unary ops (libm's expf and logf, one rounding per operation).
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

// y = silu(x) over one row of n (Kernels::silu: llama.cpp's SIMD SiLU for 8-element steps, libm's for the rest).
void silu(const Kernels& k, const float* x, int64_t n, float* y);

// y = x / max(||x||, eps) over n elements (ggml's l2_norm: the square sum in double).
void l2_norm(const float* x, int64_t n, float eps, float* y);

// The causal depthwise convolution over the last K positions of each channel, with its window carried from batch to
// batch: y[t][c] = sum over i < K of w[c][i] * in[t + i][c], where `in` is the window's K - 1 rows followed by the
// batch's rows (ggml's ssm_conv as its x86 build compiles it: added in order from zero, the products of whole
// groups of 8 taps and then of one group of 4 rounded on their own, the last K % 4 taps fused into the sum).
// Afterwards the window holds the last K - 1 rows of `in`.
struct ConvArgs {
  const float* x = nullptr;  // [n_tok][channels]
  int64_t n_tok = 0, channels = 0;
  const float* w = nullptr;  // [channels][kernel] (ssm_conv1d)
  int kernel = 0;
  float* window = nullptr;   // [kernel - 1][channels], oldest row first
  float* y = nullptr;        // [n_tok][channels]
};
void causal_conv1d(Context& ctx, const ConvArgs& a);

// The gated delta rule, token after token, each v head on its own (heads run in parallel). For v head h and token
// t, with q, k of q/k head h % n_k_heads (already L2-normalized), decay exp(g) and rate beta, and the head's state S
// (head_dim x head_dim, stored transposed as RecurrentState says):
//   S *= exp(g);  d = (v - S^T k) * beta;  S += k d^T;  out = (S^T q) / sqrt(head_dim)
// with ggml's vector routines: its f32 dot product (Kernels::dot_f32_single), fused multiply-adds for the update.
// llama.cpp's CPU backend runs this one op for a decode step and for a whole prefill batch alike (its chunked
// algorithm of 64 tokens serves backends without the op), so the state after a batch does not depend on how the
// tokens were batched.
struct DeltaRuleArgs {
  const float* q = nullptr;  // token t's q head j at q + t * stride + j * head_dim
  const float* k = nullptr;  // likewise
  const float* v = nullptr;  // token t's v head h at v + t * stride + h * head_dim
  int64_t stride = 0;
  const float* g = nullptr;     // [n_tok][n_v_heads]: log of the decay
  const float* beta = nullptr;  // [n_tok][n_v_heads]
  float* state = nullptr;       // [n_v_heads][head_dim][head_dim], updated
  float* out = nullptr;         // [n_tok][n_v_heads][head_dim]
  int64_t n_tok = 0;
  int n_k_heads = 0, n_v_heads = 0, head_dim = 0;
  // Where set, the state after the first save_after tokens (0 < save_after < n_tok) is copied there as well, laid
  // out as `state` (llama.cpp's snapshots of the state inside a batch).
  float* save = nullptr;
  int64_t save_after = 0;
};
void gated_delta_rule(Context& ctx, const DeltaRuleArgs& a);

}  // namespace df::cpu
