#include "diskformer/model/records.h"

#include <algorithm>
#include <tuple>

namespace df::model {

namespace {

std::string where(const store::RecordMap& map, uint32_t layer) {
  return map.path() + ": layer " + std::to_string(layer);
}

}  // namespace

Result<RecordLayouts> record_layouts(const ModelSpec& spec, const ModelTensors& t, const store::RecordMap& map) {
  RecordLayouts out;
  out.experts.resize(spec.n_layer);
  out.layers.resize(spec.n_layer);
  for (uint32_t il = 0; il < spec.n_layer; ++il) {
    const LayerTensors& lt = t.layers[il];
    // Dense tensors by name inside the layer image.
    const store::LayerRecord* lr = map.layer(il);
    if (!lr) return Error{where(map, il) + " has no dense tensors in the record map"};
    LayerLayout& ll = out.layers[il];
    ll.record_bytes = lr->record_bytes;
    for (const LayerField& fl : layer_fields()) {
      const gguf::TensorInfo* ti = lt.*fl.tensor;
      Mat LayerWeights::*field = fl.mat;
      if (!ti) continue;
      auto it = std::find_if(lr->tensors.begin(), lr->tensors.end(),
                             [&](const store::ImageTensor& x) { return x.name == ti->name; });
      if (it == lr->tensors.end() || it->bytes != ti->n_bytes)
        return Error{where(map, il) + ": tensor " + ti->name + " is not in the layer's record as bound"};
      ll.shapes.*field = mat_of(*ti, nullptr);
      ll.placed.push_back({field, it->slot_offset});
    }
    out.layer_record_bytes = std::max(out.layer_record_bytes, ll.record_bytes);
    if (!lt.moe()) continue;

    const store::ExpertLayerRecords* el = map.expert_layer(il);
    if (!el || el->n_experts != spec.n_expert)
      return Error{where(map, il) + ": the record map has " + std::to_string(el ? el->n_experts : 0) +
                   " experts, the model " + std::to_string(spec.n_expert)};
    ExpertLayout& xl = out.experts[il];
    xl.record_bytes = el->record_bytes;
    // A fused gate_up tensor (gemma4) holds each expert's gate rows, then its up rows: gate and up are its halves.
    Mat gate_up;
    uint64_t gate_up_at = 0;
    const std::tuple<const gguf::TensorInfo*, Mat*, uint64_t*> parts[] = {{lt.gate_exps, &xl.gate, &xl.gate_at},
                                                                          {lt.up_exps, &xl.up, &xl.up_at},
                                                                          {lt.gate_up_exps, &gate_up, &gate_up_at},
                                                                          {lt.down_exps, &xl.down, &xl.down_at}};
    for (const auto& [ti, m, at] : parts) {
      if (!ti) continue;
      auto it = std::find_if(el->parts.begin(), el->parts.end(),
                             [&](const store::ImageTensor& x) { return x.name == ti->name; });
      if (it == el->parts.end() || it->bytes * spec.n_expert != ti->n_bytes)
        return Error{where(map, il) + ": tensor " + ti->name + " is not in the layer's expert records as bound"};
      *m = mat_of(*ti, nullptr).slice(0, int64_t(ti->rows() / spec.n_expert));
      *at = it->slot_offset;
    }
    if (lt.gate_up_exps) {
      const int64_t F = gate_up.rows / 2;
      xl.gate = gate_up.slice(0, F);  // shapes only: the halves' places are the offsets
      xl.up = gate_up.slice(0, F);
      xl.gate_at = gate_up_at;
      xl.up_at = gate_up_at + uint64_t(F) * gate_up.row_bytes;
    }
    out.expert_record_bytes = std::max(out.expert_record_bytes, xl.record_bytes);
  }
  return out;
}

ExpertWeights expert_at(const ExpertLayout& l, const uint8_t* image) {
  return {l.gate.at(image + l.gate_at), l.up.at(image + l.up_at), l.down.at(image + l.down_at)};
}

LayerWeights layer_at(const LayerLayout& l, const uint8_t* image) {
  LayerWeights w = l.shapes;
  for (const LayerLayout::Placed& p : l.placed) w.*p.field = (l.shapes.*p.field).at(image + p.offset);
  return w;
}

}  // namespace df::model
