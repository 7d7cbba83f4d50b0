// The RAM residency plan: which weights stay in RAM for the whole run and which stream from disk through a RAM
// tier, from the model's shape and the RAM budget. Without a budget everything is resident.
//
//   no budget:      dense tensors in one arena; a MoE model's experts in a RAM tier with a slot per record, read at
//                   open and never evicted.
//   MoE, budget:    resident = embeddings, output head, every layer's attention, norms and router;
//                   streamed = routed experts, one (layer, expert) record per slot.
//   dense, budget:  resident = embeddings, output head, final norm; streamed = whole layers, one layer per slot, the
//                   next layer read while the current one computes.
// A per-layer embedding table (gemma4 E2B's per_layer_token_embd: one row per token, every layer's slice) stays in
// the arena where the budget holds it after the tier's slots; otherwise its rows stream from disk through a row
// cache of at least kMinRowSlots rows, half of them warmed at open with the ids real text uses most.
// Record sizes are store::RecordMap's images (model/records.h), each slot rounded up to 4 KiB. The budget covers
// weights and their caches (resident weights + slots), as CLI.md's --ram-budget says; the KV cache, a hybrid model's
// recurrent state with its copies (engine/hybrid_sequence.h) and the work buffers come on top and are reported beside
// it. A budget that cannot hold the resident weights plus the minimum slots is refused with the numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "diskformer/engine/model_files.h"
#include "diskformer/util/result.h"

namespace df::engine {

enum class Residency {
  kAllResident,    // every tensor in RAM
  kStreamExperts,  // routed experts through a RAM tier under the budget
  kStreamLayers,   // dense layers through a RAM tier under the budget
};
const char* residency_name(Residency r);

struct WeightPlan {
  Residency mode = Residency::kAllResident;
  uint64_t model_bytes = 0;     // all tensor bytes of the file
  uint64_t resident_bytes = 0;  // the arena of resident dense tensors
  uint64_t kv_bytes = 0;        // the KV cache at the chosen context
  uint64_t state_bytes = 0;     // hybrid models: the recurrent state of a sequence with its copies for truncate()
  uint64_t work_bytes = 0;      // activations and scratch (an estimate)
  uint64_t record_bytes = 0;    // one record of the tier (expert or layer image); 0 without a tier
  uint64_t slot_bytes = 0;      // a slot: record_bytes rounded up to 4 KiB
  uint32_t n_records = 0;       // records the tier serves
  uint32_t slots = 0;           // records the tier holds
  uint32_t min_slots = 0;       // the fewest slots that can run at all
  uint64_t min_budget = 0;      // under a budget: the smallest one accepted (resident + minimum slots and rows)
  // The per-layer embedding table: in the arena (row_slots 0) or through a row cache of row_slots rows.
  uint64_t row_table_bytes = 0;  // 0: the model has none
  uint64_t row_bytes = 0;        // one token's row
  uint32_t row_slots = 0;

  bool records_resident() const { return slots > 0 && slots == n_records && mode == Residency::kAllResident; }
  bool rows_stream() const { return row_slots > 0; }
  // What the budget covers.
  uint64_t weight_bytes() const {
    return resident_bytes + uint64_t(slots) * slot_bytes + uint64_t(row_slots) * row_bytes;
  }
  uint64_t total_bytes() const { return weight_bytes() + kv_bytes + state_bytes + work_bytes; }
  std::string describe() const;  // one line for logs
};

// budget: bytes of RAM for weights and their caches (--ram-budget); nullopt = unlimited.
Result<WeightPlan> plan_weights(const ModelFiles& m, uint32_t n_ctx, std::optional<uint64_t> budget);

// The resident arena: where each tensor goes. Pieces of 256 KiB and more keep their file offset's 4 KiB phase (an
// O_DIRECT read lands in place), smaller ones are packed at 64 bytes (read through the reader's bounce buffers).
struct ArenaLayout {
  std::vector<std::pair<const gguf::TensorInfo*, uint64_t>> at;  // tensor, offset in the arena
  uint64_t bytes = 0;
};
ArenaLayout arena_layout(const store::RecordMap& map, std::span<const gguf::TensorInfo* const> tensors);

// The tensors a CPU run keeps in its arena: embeddings, final norm, output head (when untied), the other tensors
// outside the blocks (ModelTensors::globals), the per-layer embedding table unless its rows stream, and each
// layer's dense tensors unless the layers stream.
std::vector<const gguf::TensorInfo*> arena_tensors(const model::ModelTensors& t, bool with_layers,
                                                   bool with_row_table = true);

// The fewest rows a row cache of the per-layer embedding table may have.
constexpr uint32_t kMinRowSlots = 256;

}  // namespace df::engine
