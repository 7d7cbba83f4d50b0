#include "diskformer/engine/plan.h"

#include <algorithm>

#include "diskformer/backend/cpu/kv_cache.h"
#include "diskformer/util/check.h"
#include "diskformer/util/size.h"
#include "engine/hybrid_sequence.h"

namespace df::engine {

const char* residency_name(Residency r) {
  switch (r) {
    case Residency::kAllResident: return "all resident";
    case Residency::kStreamExperts: return "experts streamed";
    case Residency::kStreamLayers: return "layers streamed";
  }
  return "?";
}

namespace {

constexpr uint64_t kPage = 4096;

// Activations of a 512-token batch plus the logits, generously: exact sizes depend on the batch.
uint64_t work_estimate(const model::ModelSpec& s) {
  const uint64_t batch = 512;
  const uint64_t widest = std::max<uint64_t>({s.n_embd, s.q_dim() * (s.attn_gate ? 2 : 1), s.n_ff,
                                              uint64_t(s.n_ff_expert) * 2, uint64_t(s.delta_net.conv_dim()) * 2});
  return batch * widest * 4 * 12 + uint64_t(s.n_vocab) * 4 * 2;
}

uint64_t place_piece(uint64_t at, uint64_t file_offset, uint64_t length) {
  constexpr uint64_t kBig = 256 << 10, kPack = 64;
  if (length >= kBig) return (at + kPage - 1) / kPage * kPage + file_offset % kPage;
  return (at + kPack - 1) / kPack * kPack;
}

}  // namespace

ArenaLayout arena_layout(const store::RecordMap& map, std::span<const gguf::TensorInfo* const> tensors) {
  ArenaLayout a;
  for (const gguf::TensorInfo* t : tensors) {
    if (std::any_of(a.at.begin(), a.at.end(), [&](const auto& p) { return p.first == t; })) continue;
    const std::optional<store::ByteRange> r = map.tensor(t->name);
    DF_CHECK(r.has_value());  // arena tensors lie outside the expert records in every map
    const uint64_t off = place_piece(a.bytes, r->offset, r->length);
    a.at.push_back({t, off});
    a.bytes = off + r->length;
  }
  return a;
}

std::vector<const gguf::TensorInfo*> arena_tensors(const model::ModelTensors& t, bool with_layers,
                                                   bool with_row_table) {
  std::vector<const gguf::TensorInfo*> list = {t.token_embd, t.output_norm};
  if (t.output != t.token_embd) list.push_back(t.output);
  for (auto* g : t.globals()) list.push_back(g);
  if (t.ple_table && with_row_table) list.push_back(t.ple_table);
  if (with_layers)
    for (const auto& l : t.layers)
      for (auto* x : l.dense()) list.push_back(x);
  return list;
}

std::string WeightPlan::describe() const {
  std::string s = std::string(residency_name(mode)) + ": resident " + format_size(resident_bytes);
  if (records_resident()) {
    s += " + " + std::to_string(slots) + " expert records of " + format_size(record_bytes);
  } else if (slots) {
    s += ", " + std::to_string(slots) + " slots of " + format_size(record_bytes);
  }
  if (row_table_bytes) {
    s += rows_stream() ? ", per-layer embedding table on disk through " + std::to_string(row_slots) + " rows of " +
                             format_size(row_bytes)
                       : ", per-layer embedding table resident (" + format_size(row_table_bytes) + ")";
  }
  s += ", KV cache " + format_size(kv_bytes);
  if (state_bytes) s += ", recurrent state " + format_size(state_bytes);
  s += ", work " + format_size(work_bytes);
  return s + " (model " + format_size(model_bytes) + ")";
}

Result<WeightPlan> plan_weights(const ModelFiles& m, uint32_t n_ctx, std::optional<uint64_t> budget) {
  const model::ModelSpec& spec = m.spec;
  WeightPlan p;
  p.model_bytes = m.tensor_bytes;
  p.kv_bytes = cpu::KvCache::bytes_for(spec, n_ctx);
  p.state_bytes = spec.n_recurrent() ? hybrid_state_bytes(spec) : 0;
  p.work_bytes = work_estimate(spec);
  const bool moe = spec.moe();
  const uint64_t expert_records = moe ? uint64_t(spec.n_layer) * spec.n_expert : 0;
  if (expert_records > UINT32_MAX)
    return Error{m.path + ": " + std::to_string(expert_records) + " expert records are more than a tier indexes"};
  const bool stream_layers = budget && !moe;
  const gguf::TensorInfo* table = m.tensors.ple_table;
  p.resident_bytes = arena_layout(m.records, arena_tensors(m.tensors, !stream_layers, !budget)).bytes;
  if (table) {
    p.row_table_bytes = table->n_bytes;
    p.row_bytes = table->row_bytes();
  }
  if (moe) {
    p.record_bytes = m.layouts.expert_record_bytes;
    p.n_records = uint32_t(expert_records);
    p.min_slots = 2 * spec.n_expert_used;
  } else if (stream_layers) {
    p.record_bytes = m.layouts.layer_record_bytes;
    p.n_records = spec.n_layer;
    p.min_slots = 2;  // the layer computing and the next one being read
  }
  p.slot_bytes = (p.record_bytes + kPage - 1) / kPage * kPage;
  if (!budget) {
    p.slots = p.n_records;  // a MoE model's experts all in RAM; a dense model has no tier
    return p;
  }
  p.mode = moe ? Residency::kStreamExperts : Residency::kStreamLayers;
  const uint32_t min_rows = table ? uint32_t(std::min<uint64_t>(kMinRowSlots, table->rows())) : 0;
  const uint64_t row_reserve = uint64_t(min_rows) * p.row_bytes;
  const uint64_t need = p.resident_bytes + uint64_t(p.min_slots) * p.slot_bytes + row_reserve;
  p.min_budget = need;
  if (*budget < need)
    return Error{"RAM budget " + format_size(*budget) + " (" + std::to_string(*budget) +
                 " bytes) is too small for this model: resident weights " + format_size(p.resident_bytes) + " + " +
                 std::to_string(p.min_slots) + " slots of " + format_size(p.slot_bytes) +
                 (table ? " + " + std::to_string(min_rows) + " per-layer embedding rows of " + format_size(p.row_bytes)
                        : std::string()) +
                 " = " + format_size(need) + " (" + std::to_string(need) + " bytes) at least"};
  // The tier's slots first (a layer or expert missed costs far more than a row), then the table where it fits.
  p.slots = uint32_t(std::min<uint64_t>(p.n_records, (*budget - p.resident_bytes - row_reserve) / p.slot_bytes));
  if (table) {
    const uint64_t left = *budget - p.resident_bytes - uint64_t(p.slots) * p.slot_bytes;
    const uint64_t with_table = arena_layout(m.records, arena_tensors(m.tensors, !stream_layers, true)).bytes;
    if (with_table - p.resident_bytes <= left) {
      p.resident_bytes = with_table;
    } else {
      p.row_slots = uint32_t(std::min<uint64_t>(table->rows(), left / p.row_bytes));
    }
  }
  return p;
}

}  // namespace df::engine
