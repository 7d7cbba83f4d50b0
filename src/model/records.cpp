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
    const std::pair<const gguf::TensorInfo*, Mat LayerWeights::*> fields[] = {
        {lt.attn_norm, &LayerWeights::attn_norm}, {lt.wq, &LayerWeights::wq},
        {lt.wk, &LayerWeights::wk},               {lt.wv, &LayerWeights::wv},
        {lt.wo, &LayerWeights::wo},               {lt.q_norm, &LayerWeights::q_norm},
        {lt.k_norm, &LayerWeights::k_norm},       {lt.ffn_norm, &LayerWeights::ffn_norm},
        {lt.ffn_gate, &LayerWeights::ffn_gate},   {lt.ffn_up, &LayerWeights::ffn_up},
        {lt.ffn_down, &LayerWeights::ffn_down},   {lt.gate_inp, &LayerWeights::gate_inp},
        {lt.ssm_qkv, &LayerWeights::ssm_qkv},     {lt.ssm_z, &LayerWeights::ssm_z},
        {lt.ssm_conv, &LayerWeights::ssm_conv},   {lt.ssm_dt_bias, &LayerWeights::ssm_dt_bias},
        {lt.ssm_a, &LayerWeights::ssm_a},         {lt.ssm_beta, &LayerWeights::ssm_beta},
        {lt.ssm_alpha, &LayerWeights::ssm_alpha}, {lt.ssm_norm, &LayerWeights::ssm_norm},
        {lt.ssm_out, &LayerWeights::ssm_out},     {lt.gate_inp_shexp, &LayerWeights::gate_inp_shexp},
        {lt.gate_shexp, &LayerWeights::gate_shexp}, {lt.up_shexp, &LayerWeights::up_shexp},
        {lt.down_shexp, &LayerWeights::down_shexp}};
    for (const auto& [ti, field] : fields) {
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
    const std::tuple<const gguf::TensorInfo*, Mat*, uint64_t*> parts[] = {
        {lt.gate_exps, &xl.gate, &xl.gate_at}, {lt.up_exps, &xl.up, &xl.up_at}, {lt.down_exps, &xl.down, &xl.down_at}};
    for (const auto& [ti, m, at] : parts) {
      auto it = std::find_if(el->parts.begin(), el->parts.end(),
                             [&](const store::ImageTensor& x) { return x.name == ti->name; });
      if (it == el->parts.end() || it->bytes * spec.n_expert != ti->n_bytes)
        return Error{where(map, il) + ": tensor " + ti->name + " is not in the layer's expert records as bound"};
      *m = mat_of(*ti, nullptr).slice(0, int64_t(ti->rows() / spec.n_expert));
      *at = it->slot_offset;
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
