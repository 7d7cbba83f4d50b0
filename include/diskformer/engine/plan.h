// The residency plan: which weights stay in RAM and which are streamed from disk through a slot pool, from the
// model's shape and the RAM budget. Without a budget everything is resident.
//
//   MoE, budget:   resident = embeddings, output head, every layer's attention, norms and router;
//                  streamed = routed experts, one (layer, expert) record per slot (gate, up, down rows).
//   dense, budget: resident = embeddings, output head, final norm; streamed = whole layers, one layer per slot, the
//                  next layer read while the current one computes.
// The budget covers weights and their caches (resident weights + slots), as CLI.md's --ram-budget says; the KV
// cache and work buffers come on top and are reported beside it. A budget that cannot hold the resident weights
// plus the minimum slots is refused with the numbers.
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

  uint64_t weight_bytes() const { return resident_bytes + uint64_t(slots) * record_bytes; }  // what the budget covers
  uint64_t total_bytes() const { return weight_bytes() + kv_bytes + work_bytes; }
  std::string describe() const;  // one line for logs
};

// budget: bytes of RAM for weights and their caches (--ram-budget); nullopt = unlimited.
Result<WeightPlan> plan_weights(const model::ModelSpec& spec, const model::ModelTensors& tensors,
                                uint64_t file_tensor_bytes, uint32_t n_ctx, std::optional<uint64_t> budget);

// Where a piece of `length` bytes read from `file_offset` goes in a buffer, at or after `at`: pieces of 256 KiB
// and more keep the file offset's 4 KiB phase (O_DIRECT reads land in place), smaller ones are packed at 64 bytes
// (read through the reader's bounce buffers). The resident arena and every slot record are laid out with it.
uint64_t place_piece(uint64_t at, uint64_t file_offset, uint64_t length);

// Bytes of the largest expert record of a layer (gate + up + down rows of one expert), and of a layer's dense
// tensors laid out as one record.
uint64_t expert_record_bytes(const model::LayerTensors& l);
uint64_t layer_record_bytes(const model::LayerTensors& l);

}  // namespace df::engine
