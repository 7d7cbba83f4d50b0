// The RAM residency plan: which weights stay in RAM for the whole run and which stream from disk through a RAM
// tier, from the model's shape, the context and the RAM budget. Without a budget everything is resident.
//
//   no budget:      dense tensors in one arena; a MoE model's experts in a RAM tier with a slot per record, read at
//                   open and never evicted.
//   MoE, budget:    resident = embeddings, output head, every layer's attention, norms and router;
//                   streamed = routed experts, one (layer, expert) record per slot.
//   dense, budget:  resident = embeddings, output head, final norm; streamed = whole layers, one layer per slot, the
//                   next layer read while the current one computes.
// The tables read one row per token -- a per-layer embedding table (gemma4 E2B's per_layer_token_embd, every layer's
// slice of a token) and, under a budget, the token embeddings of a model whose output head is a tensor of its own (a
// tied head reads every row every token) -- stay in the arena where the budget holds them after the tier's slots,
// the per-layer table first; otherwise their rows stream from disk through a row cache of at least kMinRowSlots
// rows, half of them warmed at open with the ids real text uses most.
// Record sizes are store::RecordMap's images (model/records.h), each slot rounded up to 4 KiB. The budget covers all
// the plan counts: resident weights, the KV cache, a hybrid model's recurrent state with its copies
// (engine/hybrid_sequence.h) and the work buffers where the backend keeps them in RAM (the CPU's; CUDA keeps them on
// the GPU, whose plan counts them), the slots and the rows. A budget that cannot hold the fixed part plus the minimum
// slots and rows is refused with the numbers; without a budget, a plan larger than the machine's RAM is.
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

// A table read one row per token: in the arena, or through a row cache of `slots` rows.
struct RowTablePlan {
  uint64_t table_bytes = 0;  // 0: the model has no such table (or it never streams)
  uint64_t row_bytes = 0;    // one token's row
  uint32_t slots = 0;        // 0: in the arena
  uint32_t min_slots = 0;    // under a budget: the fewest rows its cache may have
  uint64_t in_arena = 0;     // under a budget that holds the table: its share of resident_bytes
  bool streams() const { return slots > 0; }
};

struct WeightPlan {
  Residency mode = Residency::kAllResident;
  uint32_t n_ctx = 0;
  uint32_t sessions = 1;        // the KV, state and work bytes below are those of this many sequences
  uint64_t model_bytes = 0;     // all tensor bytes of the file
  uint64_t resident_bytes = 0;  // the arena of resident dense tensors
  uint64_t kv_bytes = 0;        // the KV cache at n_ctx (f16 keys and values)
  uint64_t state_bytes = 0;     // hybrid models: the recurrent state of a sequence with its copies for truncate()
  uint64_t work_bytes = 0;      // activations and scratch of a batch, the logits and the sampler's candidates
  bool kv_in_ram = true;        // kv, state and work bytes are RAM (the CPU backend) and count against the budget
  uint64_t record_bytes = 0;    // one record of the tier (expert or layer image); 0 without a tier
  uint64_t slot_bytes = 0;      // a slot: record_bytes rounded up to 4 KiB
  uint32_t n_records = 0;       // records the tier serves
  uint32_t slots = 0;           // records the tier holds
  uint32_t min_slots = 0;       // the fewest slots that can run at all
  RowTablePlan ple;     // the per-layer embedding table
  RowTablePlan tokens;  // the token embeddings (table_bytes 0 where they stay in the arena in any case)

  bool records_resident() const { return slots > 0 && slots == n_records && mode == Residency::kAllResident; }
  bool rows_stream() const { return ple.streams(); }  // the per-layer table's
  // What every budget must hold before slots and rows: resident weights, and in RAM the KV cache, the recurrent
  // state and work buffers.
  uint64_t fixed_bytes() const { return resident_bytes + (kv_in_ram ? kv_bytes + state_bytes + work_bytes : 0); }
  uint64_t cache_bytes() const {
    return uint64_t(slots) * slot_bytes + uint64_t(ple.slots) * ple.row_bytes + uint64_t(tokens.slots) * tokens.row_bytes;
  }
  uint64_t total_bytes() const { return fixed_bytes() + cache_bytes(); }  // what the budget covers
  // The smallest budget accepted (the tables then stream through the fewest rows).
  uint64_t min_budget() const {
    return fixed_bytes() - ple.in_arena - tokens.in_arena + uint64_t(min_slots) * slot_bytes +
           uint64_t(ple.min_slots) * ple.row_bytes + uint64_t(tokens.min_slots) * tokens.row_bytes;
  }
  std::string describe() const;  // one line for logs
};

struct RamPlanOptions {
  uint32_t n_ctx = 4096;                // KV cache positions
  uint32_t n_batch = 512;               // tokens per forward pass (the work buffers' rows)
  uint32_t sessions = 1;                // sequences open at once: each has its KV cache, state and work buffers
  std::optional<uint64_t> budget;       // bytes of RAM for all the plan counts (--ram-budget); nullopt = unlimited
  bool kv_in_ram = true;                // the CPU backend; false for CUDA
  // The token embeddings may stream through a row cache under a budget (the CPU backend reads them so; a CUDA run
  // keeps them as its own plan says).
  bool token_rows = true;
  std::optional<uint64_t> machine_ram;  // without a budget, a plan larger than this is refused; nullopt: unchecked
};

Result<WeightPlan> plan_weights(const ModelFiles& m, const RamPlanOptions& options);

// This machine's RAM (sysinfo's total), what a run without --ram-budget must fit in; nullopt where unknown.
std::optional<uint64_t> machine_ram_bytes();

// The resident arena: where each tensor goes. Pieces of 256 KiB and more keep their file offset's 4 KiB phase (an
// O_DIRECT read lands in place), smaller ones are packed at 64 bytes (read through the reader's bounce buffers).
struct ArenaLayout {
  std::vector<std::pair<const gguf::TensorInfo*, uint64_t>> at;  // tensor, offset in the arena
  uint64_t bytes = 0;
};
ArenaLayout arena_layout(const store::RecordMap& map, std::span<const gguf::TensorInfo* const> tensors);

// The tensors a CPU run keeps in its arena: the token embeddings unless their rows stream, final norm, output head
// (when untied), the other tensors outside the blocks (ModelTensors::globals), the per-layer embedding table unless
// its rows stream, and each layer's dense tensors unless the layers stream.
std::vector<const gguf::TensorInfo*> arena_tensors(const model::ModelTensors& t, bool with_layers,
                                                   bool with_ple_table = true, bool with_token_embd = true);
// The arena tensors of a CPU run under this plan.
std::vector<const gguf::TensorInfo*> arena_tensors(const model::ModelTensors& t, const WeightPlan& p);

// The fewest rows a row cache of a per-token table may have.
constexpr uint32_t kMinRowSlots = 256;

}  // namespace df::engine
