// The attention cache: keys and values of every past position, in f16 as llama.cpp keeps them. Each layer has its
// own width (gemma4's sliding and full layers differ in KV heads and head size); a layer that shares another's KV
// (gemma4's last shared_kv_layers) has no storage and reads its source's.
#pragma once

#include <cstdint>
#include <vector>

#include "diskformer/model/spec.h"

namespace df::cpu {

struct KvCache {
  struct Layer {
    uint64_t k_offset = 0, v_offset = 0;  // into k and v: position 0 of the layer whose cache it reads
    uint32_t dim_k = 0, dim_v = 0;        // n_head_kv * head_dim of that layer
  };
  uint32_t n_ctx = 0, n_layer = 0;
  uint32_t n_past = 0;       // positions filled
  std::vector<Layer> layers;  // [n_layer]
  std::vector<uint16_t> k;   // per owning layer: [n_ctx][dim_k] f16
  std::vector<uint16_t> v;   // per owning layer: [n_ctx][dim_v] f16

  KvCache() = default;
  // Layers without attention (a hybrid model's DeltaNet layers) have no storage.
  KvCache(const model::ModelSpec& s, uint32_t n_ctx) : n_ctx(n_ctx), n_layer(s.n_layer), layers(s.n_layer) {
    uint64_t k_elems = 0, v_elems = 0;
    for (uint32_t il = 0; il < s.n_layer; ++il) {
      if (s.is_recurrent(il)) continue;
      const model::LayerSpec l = s.layer(il);
      if (l.kv_layer != il) {
        layers[il] = layers[l.kv_layer];  // sources come first
        continue;
      }
      layers[il] = {k_elems, v_elems, l.kv_dim_k(), l.kv_dim_v()};
      k_elems += uint64_t(n_ctx) * l.kv_dim_k();
      v_elems += uint64_t(n_ctx) * l.kv_dim_v();
    }
    k.resize(k_elems);
    v.resize(v_elems);
  }

  uint16_t* k_at(uint32_t layer, uint32_t pos) {
    return k.data() + layers[layer].k_offset + uint64_t(pos) * layers[layer].dim_k;
  }
  uint16_t* v_at(uint32_t layer, uint32_t pos) {
    return v.data() + layers[layer].v_offset + uint64_t(pos) * layers[layer].dim_v;
  }
  uint64_t bytes() const { return (k.size() + v.size()) * 2; }
  static uint64_t bytes_for(const model::ModelSpec& s, uint32_t n_ctx) {
    uint64_t b = 0;
    for (uint32_t il = 0; il < s.n_layer; ++il) {
      if (s.is_recurrent(il)) continue;
      const model::LayerSpec l = s.layer(il);
      if (l.kv_layer == il) b += uint64_t(n_ctx) * (l.kv_dim_k() + l.kv_dim_v()) * 2;
    }
    return b;
  }
};

}  // namespace df::cpu
