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

// Activations of a 512-token batch plus the logits, generously: exact sizes depend on the batch.
uint64_t work_estimate(const model::ModelSpec& s) {
  const uint64_t batch = 512;
  const uint64_t widest = std::max<uint64_t>({s.n_embd, s.q_dim(), s.n_ff, uint64_t(s.n_ff_expert) * 2});
  return batch * widest * 4 * 12 + uint64_t(s.n_vocab) * 4 * 2;
}

uint64_t layout_bytes(const std::vector<std::pair<uint64_t, uint64_t>>& pieces) {  // (file offset, length)
  uint64_t at = 0;
  for (auto [off, len] : pieces) at = place_piece(at, off, len) + len;
  return at;
}

}  // namespace

uint64_t place_piece(uint64_t at, uint64_t file_offset, uint64_t length) {
  constexpr uint64_t kPage = 4096, kBig = 256 << 10, kPack = 64;
  if (length >= kBig) return (at + kPage - 1) / kPage * kPage + file_offset % kPage;
  return (at + kPack - 1) / kPack * kPack;
}

uint64_t expert_record_bytes(const model::LayerTensors& l) {
  if (!l.moe()) return 0;
  const uint64_t n = l.gate_exps->shape.back();
  uint64_t most = 0;
  for (uint64_t e = 0; e < n; ++e) {
    std::vector<std::pair<uint64_t, uint64_t>> pieces;
    for (auto* t : {l.gate_exps, l.up_exps, l.down_exps}) pieces.push_back({t->offset + e * (t->n_bytes / n), t->n_bytes / n});
    most = std::max(most, layout_bytes(pieces));
  }
  return most;
}

uint64_t layer_record_bytes(const model::LayerTensors& l) {
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  for (auto* t : l.dense()) pieces.push_back({t->offset, t->n_bytes});
  return layout_bytes(pieces);
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
  std::vector<std::pair<uint64_t, uint64_t>> head_pieces = {{t.token_embd->offset, t.token_embd->n_bytes},
                                                             {t.output_norm->offset, t.output_norm->n_bytes}};
  if (t.output != t.token_embd) head_pieces.push_back({t.output->offset, t.output->n_bytes});
  const uint64_t head = layout_bytes(head_pieces);
  uint64_t dense = 0, experts = 0, record = 0, layer_max = 0;
  for (const auto& l : t.layers) {
    dense += layer_record_bytes(l) + 4096;
    layer_max = std::max(layer_max, layer_record_bytes(l));
    if (l.moe()) {
      experts += l.gate_exps->n_bytes + l.up_exps->n_bytes + l.down_exps->n_bytes + 3 * 4096;
      record = std::max(record, expert_record_bytes(l));
    }
  }
  if (!budget) {
    p.resident_bytes = head + dense + experts;
    return p;
  }
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
  const uint64_t fixed = p.resident_bytes;
  const uint64_t need = fixed + uint64_t(p.min_slots) * p.record_bytes;
  if (*budget < need)
    return Error{"RAM budget " + format_size(*budget) + " (" + std::to_string(*budget) +
                 " bytes) is too small for this model: resident weights " + format_size(p.resident_bytes) + " + " +
                 std::to_string(p.min_slots) + " slots of " + format_size(p.record_bytes) + " = " +
                 format_size(need) + " (" + std::to_string(need) + " bytes) at least"};
  const uint64_t all_records =
      spec.moe() ? uint64_t(spec.n_layer) * spec.n_expert : uint64_t(spec.n_layer);
  p.slots = uint32_t(std::min<uint64_t>(all_records, (*budget - fixed) / p.record_bytes));
  return p;
}

}  // namespace df::engine
