// The residency plan: which weights stay in RAM and which are streamed from disk through a slot pool, from the
// model's shape and the RAM budget. Without a budget everything is resident.
//
//   MoE, budget:   resident = embeddings, output head, every layer's attention, norms and router;
//                  streamed = routed experts, one (layer, expert) record per slot (gate, up, down rows).
//   dense, budget: resident = embeddings, output head, final norm; streamed = whole layers, one layer per slot, the
//                  next layer read while the current one computes.
// A budget that cannot hold the fixed part plus the minimum slots is refused with the numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/util/result.h"

namespace df::engine {

enum class Residency {
  kAllResident,    // every tensor in RAM
  kStreamExperts,  // routed experts through the pool
  kStreamLayers,   // dense layers through the pool
};
const char* residency_name(Residency r);

struct WeightPlan {
  Residency mode = Residency::kAllResident;
  uint64_t model_bytes = 0;     // all tensor bytes of the file
  uint64_t resident_bytes = 0;  // weights held in RAM for the whole run
  uint64_t kv_bytes = 0;        // the KV cache at the chosen context
  uint64_t work_bytes = 0;      // activations and scratch (an estimate)
  uint64_t record_bytes = 0;    // one streamed record (expert or layer), 0 when nothing streams
  uint32_t slots = 0;           // records the pool holds
  uint32_t min_slots = 0;       // the fewest slots that can run at all

  uint64_t total_bytes() const { return resident_bytes + kv_bytes + work_bytes + uint64_t(slots) * record_bytes; }
  std::string describe() const;  // one line for logs
};

// budget: bytes of RAM for weights, caches, the KV cache and work buffers (--ram-budget); nullopt = unlimited.
Result<WeightPlan> plan_weights(const model::ModelSpec& spec, const model::ModelTensors& tensors,
                                uint64_t file_tensor_bytes, uint32_t n_ctx, std::optional<uint64_t> budget);

// Bytes of one expert record of layer il (gate + up + down of one expert), or of all dense tensors of layer il.
uint64_t expert_record_bytes(const model::LayerTensors& l);
uint64_t layer_record_bytes(const model::LayerTensors& l);

}  // namespace df::engine
