// The attention cache: keys and values of every past position, in f16 as llama.cpp keeps them.
#pragma once

#include <cstdint>
#include <vector>

#include "diskformer/model/spec.h"

namespace df::cpu {

struct KvCache {
  uint32_t n_ctx = 0, n_layer = 0, dim_k = 0, dim_v = 0;
  uint32_t n_past = 0;     // positions filled
  std::vector<uint16_t> k;  // [n_layer][n_ctx][dim_k] f16
  std::vector<uint16_t> v;  // [n_layer][n_ctx][dim_v] f16

  KvCache() = default;
  // The layers that attend (a hybrid model's DeltaNet layers have no KV cache), in layer order.
  KvCache(const model::ModelSpec& s, uint32_t n_ctx)
      : n_ctx(n_ctx), n_layer(s.n_kv_layers()), dim_k(s.kv_dim_k()), dim_v(s.kv_dim_v()),
        k(uint64_t(n_layer) * n_ctx * s.kv_dim_k()), v(uint64_t(n_layer) * n_ctx * s.kv_dim_v()) {}

  uint16_t* k_at(uint32_t layer, uint32_t pos) { return k.data() + (uint64_t(layer) * n_ctx + pos) * dim_k; }
  uint16_t* v_at(uint32_t layer, uint32_t pos) { return v.data() + (uint64_t(layer) * n_ctx + pos) * dim_v; }
  uint64_t bytes() const { return (k.size() + v.size()) * 2; }
  static uint64_t bytes_for(const model::ModelSpec& s, uint32_t n_ctx) {
    return uint64_t(s.n_kv_layers()) * n_ctx * (s.kv_dim_k() + s.kv_dim_v()) * 2;
  }
};

}  // namespace df::cpu
