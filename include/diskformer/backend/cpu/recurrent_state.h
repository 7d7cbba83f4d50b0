// The recurrent state of one sequence of a hybrid model: what its Gated DeltaNet layers carry from token to token,
// f32 as llama.cpp keeps it. Unlike a KV cache it cannot be cut back to an earlier position; a sequence that needs
// one keeps copies (engine's hybrid sequence) and recomputes from them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "diskformer/model/spec.h"

namespace df::cpu {

struct RecurrentState {
  uint32_t n_layer = 0;    // DeltaNet layers (slot i: the i-th recurrent layer of the model)
  uint32_t conv_rows = 0;  // conv_kernel - 1
  uint32_t conv_dim = 0;   // channels of the convolution (q, k, v)
  uint32_t n_heads = 0;    // v heads
  uint32_t head_dim = 0;
  uint32_t n_past = 0;     // positions it has seen
  // [n_layer][conv_rows][conv_dim]: the projections of the last conv_rows positions, oldest first (zeros before the
  // sequence's start).
  std::vector<float> conv;
  // [n_layer][n_heads][head_dim][head_dim]: head h's state S stored transposed, element [j][i] = S[i][j] (row j is
  // what output j reads), as llama.cpp's fused delta-rule op keeps it.
  std::vector<float> ssm;

  RecurrentState() = default;
  explicit RecurrentState(const model::ModelSpec& s)
      : n_layer(s.n_recurrent()), conv_rows(s.delta_net.conv_kernel - 1), conv_dim(s.delta_net.conv_dim()),
        n_heads(s.delta_net.n_v_heads), head_dim(s.delta_net.head_dim),
        conv(uint64_t(n_layer) * conv_rows * conv_dim), ssm(uint64_t(n_layer) * n_heads * head_dim * head_dim) {}

  float* conv_at(uint32_t slot) { return conv.data() + uint64_t(slot) * conv_rows * conv_dim; }
  float* ssm_at(uint32_t slot) { return ssm.data() + uint64_t(slot) * n_heads * head_dim * head_dim; }
  void clear() {
    std::fill(conv.begin(), conv.end(), 0.0f);
    std::fill(ssm.begin(), ssm.end(), 0.0f);
    n_past = 0;
  }
  uint64_t bytes() const { return (conv.size() + ssm.size()) * sizeof(float); }
  static uint64_t bytes_for(const model::ModelSpec& s) {
    const model::DeltaNetSpec& d = s.delta_net;
    if (s.n_recurrent() == 0) return 0;
    return uint64_t(s.n_recurrent()) *
           (uint64_t(d.conv_kernel - 1) * d.conv_dim() + uint64_t(d.n_v_heads) * d.head_dim * d.head_dim) * 4;
  }
};

}  // namespace df::cpu
