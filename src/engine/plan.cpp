#include "diskformer/engine/plan.h"

#include <algorithm>

#include "diskformer/model/kv_cache.h"
#include "diskformer/util/size.h"

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

// Per tensor placed in a slot or the arena: its start keeps the file offset's 4 KiB phase (direct reads), which
// costs up to two 4 KiB pages of padding.
constexpr uint64_t kPad = 8192;

uint64_t bytes_of(const gguf::TensorInfo* t) { return t ? t->n_bytes + kPad : 0; }

// Activations of a 512-token batch plus the logits, generously: exact sizes depend on the batch.
uint64_t work_estimate(const model::ModelSpec& s) {
  const uint64_t batch = 512;
  const uint64_t widest = std::max<uint64_t>({s.n_embd, s.q_dim(), s.n_ff, uint64_t(s.n_ff_expert) * 2});
  return batch * widest * 4 * 12 + uint64_t(s.n_vocab) * 4 * 2 + (16u << 20);
}

}  // namespace

uint64_t expert_record_bytes(const model::LayerTensors& l) {
  if (!l.moe()) return 0;
  const uint64_t n = l.gate_exps->shape.back();
  return (l.gate_exps->n_bytes + l.up_exps->n_bytes + l.down_exps->n_bytes) / n + 3 * kPad;
}

uint64_t layer_record_bytes(const model::LayerTensors& l) {
  uint64_t b = 0;
  for (auto* t : l.dense()) b += bytes_of(t);
  return b;
}

std::string WeightPlan::describe() const {
  std::string s = std::string(residency_name(mode)) + ": resident " + format_size(resident_bytes) + ", KV cache " +
                  format_size(kv_bytes) + ", work " + format_size(work_bytes);
  if (slots) s += ", " + std::to_string(slots) + " slots of " + format_size(record_bytes);
  return s + " (model " + format_size(model_bytes) + ")";
}

Result<WeightPlan> plan_weights(const model::ModelSpec& spec, const model::ModelTensors& t,
                                uint64_t file_tensor_bytes, uint32_t n_ctx, std::optional<uint64_t> budget) {
  WeightPlan p;
  p.model_bytes = file_tensor_bytes;
  p.kv_bytes = model::KvCache::bytes_for(spec, n_ctx);
  p.work_bytes = work_estimate(spec);
  uint64_t head = bytes_of(t.token_embd) + bytes_of(t.output_norm) + (t.output != t.token_embd ? bytes_of(t.output) : 0);
  uint64_t dense = 0, experts = 0, record = 0, layer_max = 0;
  for (const auto& l : t.layers) {
    dense += layer_record_bytes(l);
    layer_max = std::max(layer_max, layer_record_bytes(l));
    if (l.moe()) {
      experts += l.gate_exps->n_bytes + l.up_exps->n_bytes + l.down_exps->n_bytes;
      record = std::max(record, expert_record_bytes(l));
    }
  }
  if (!budget) {
    p.resident_bytes = head + dense + experts;
    return p;
  }
  const uint64_t fixed_base = p.kv_bytes + p.work_bytes;
  if (spec.moe()) {
    p.mode = Residency::kStreamExperts;
    p.resident_bytes = head + dense;
    p.record_bytes = record;
    p.min_slots = 2 * spec.n_expert_used;
  } else {
    p.mode = Residency::kStreamLayers;
    p.resident_bytes = head;
    p.record_bytes = layer_max;
    p.min_slots = 2;  // the layer computing and the next one being read
  }
  const uint64_t fixed = p.resident_bytes + fixed_base;
  const uint64_t need = fixed + uint64_t(p.min_slots) * p.record_bytes;
  if (*budget < need)
    return Error{"RAM budget " + format_size(*budget) + " (" + std::to_string(*budget) +
                 " bytes) is too small: resident weights " + format_size(p.resident_bytes) + " + KV cache " +
                 format_size(p.kv_bytes) + " + work buffers " + format_size(p.work_bytes) + " + " +
                 std::to_string(p.min_slots) + " slots of " + format_size(p.record_bytes) + " = " +
                 format_size(need) + " (" + std::to_string(need) + " bytes) at least"};
  const uint64_t all_records =
      spec.moe() ? uint64_t(spec.n_layer) * spec.n_expert : uint64_t(spec.n_layer);
  p.slots = uint32_t(std::min<uint64_t>(all_records, (*budget - fixed) / p.record_bytes));
  return p;
}

}  // namespace df::engine
