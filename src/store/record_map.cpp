#include "diskformer/store/record.h"

#include <algorithm>
#include <map>

#include "diskformer/gguf/breakdown.h"
#include "diskformer/util/check.h"

namespace df::store {

namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// gate, up, down first: the order a kernel reads an expert's matrices in (a fused gate_up tensor first).
int part_rank(std::string_view name) {
  if (name.find("ffn_gate_exps") != std::string_view::npos) return 0;
  if (name.find("ffn_gate_up_exps") != std::string_view::npos) return 0;
  if (name.find("ffn_up_exps") != std::string_view::npos) return 1;
  if (name.find("ffn_down_exps") != std::string_view::npos) return 2;
  return 3;
}

void sort_by_name(std::vector<std::pair<std::string, ByteRange>>& v) {
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

std::string key_text(RecordKey k) {
  return std::string(record_kind_name(k.kind)) + " (layer " + std::to_string(k.layer) + ", index " +
         std::to_string(k.index) + ")";
}

}  // namespace

std::string_view record_kind_name(RecordKind k) {
  switch (k) {
    case RecordKind::kExpert: return "expert";
    case RecordKind::kTableRow: return "table row";
    case RecordKind::kLayer: return "layer";
  }
  return "?";
}

Result<RecordMap> RecordMap::build(const gguf::File& f) {
  RecordMap m;
  std::map<uint32_t, ExpertLayerRecords> experts;
  std::map<uint32_t, LayerRecord> layers;
  for (const auto& t : f.tensors) {
    int layer = gguf::layer_of(t.name);
    if (layer < 0) {
      m.globals_.push_back({t.name, {t.offset, t.n_bytes, t.part}});
      continue;
    }
    auto L = static_cast<uint32_t>(layer);
    if (gguf::categorize(t.name) != gguf::TensorCategory::RoutedExperts) {
      auto& lr = layers[L];
      lr.layer = L;
      lr.tensors.push_back({t.name, 0, t.n_bytes, t.offset, t.part});
      continue;
    }
    uint64_t n_exp = t.shape.size() >= 2 ? t.shape.back() : 0;
    if (n_exp == 0 || n_exp > UINT32_MAX || t.n_bytes % n_exp != 0)
      return Error{f.path + ": tensor " + t.name + " at offset " + std::to_string(t.info_offset) + ": " +
                   std::to_string(t.n_bytes) + " bytes do not split into " + std::to_string(n_exp) +
                   " equal expert slices along its last dimension"};
    auto& el = experts[L];
    if (el.n_experts != 0 && el.n_experts != n_exp)
      return Error{f.path + ": tensor " + t.name + " has " + std::to_string(n_exp) + " experts, other expert " +
                   "tensors of layer " + std::to_string(L) + " have " + std::to_string(el.n_experts)};
    el.layer = L;
    el.n_experts = static_cast<uint32_t>(n_exp);
    el.parts.push_back({t.name, 0, t.n_bytes / n_exp, t.offset, t.part});
  }
  for (auto& [L, el] : experts) {
    std::stable_sort(el.parts.begin(), el.parts.end(),
                     [](const ImageTensor& a, const ImageTensor& b) { return part_rank(a.name) < part_rank(b.name); });
    for (auto& p : el.parts) {
      p.slot_offset = el.record_bytes;
      el.record_bytes += p.bytes;
    }
    m.experts_.push_back(std::move(el));
  }
  for (auto& [L, lr] : layers) {
    for (auto& t : lr.tensors) {
      t.slot_offset = align_up(lr.record_bytes, kLayerTensorAlignment);
      lr.record_bytes = t.slot_offset + t.bytes;
    }
    m.layers_.push_back(std::move(lr));
  }
  for (const char* name : {"token_embd.weight", "per_layer_token_embd.weight"}) {
    const gguf::TensorInfo* t = f.tensor(name);
    if (!t || t->rows() == 0) continue;
    m.tables_.push_back({t->name, t->rows(), t->row_bytes(), t->offset, t->part});
  }
  uint32_t max_layer = 0;
  for (const auto& el : m.experts_) max_layer = std::max(max_layer, el.layer + 1);
  for (const auto& lr : m.layers_) max_layer = std::max(max_layer, lr.layer + 1);
  m.expert_index_.assign(max_layer, -1);
  m.layer_index_.assign(max_layer, -1);
  for (size_t i = 0; i < m.experts_.size(); ++i) m.expert_index_[m.experts_[i].layer] = static_cast<int32_t>(i);
  for (size_t i = 0; i < m.layers_.size(); ++i) m.layer_index_[m.layers_[i].layer] = static_cast<int32_t>(i);
  return m;
}

Result<RecordMap> RecordMap::in_place(const gguf::File& f) {
  DF_ASSIGN(RecordMap m, build(f));
  m.files_.clear();
  for (size_t i = 0; i < f.n_parts(); ++i) m.files_.push_back(f.part_path(i));
  m.file_bytes_ = f.file_size;
  for (const auto& t : f.tensors) {
    DF_CHECK(t.part < m.files_.size());
    m.tensor_ranges_.push_back({t.name, {t.offset, t.n_bytes, t.part}});
  }
  sort_by_name(m.tensor_ranges_);
  return m;
}

Result<RecordMap> RecordMap::repacked(const gguf::File& f, const std::string& data_path) {
  DF_ASSIGN(RecordMap m, build(f));
  m.files_ = {data_path};
  m.repacked_ = true;
  uint64_t pos = 0;
  for (auto& [name, range] : m.globals_) {
    pos = align_up(pos, kRecordAlignment);
    range.offset = pos;
    range.file = 0;
    pos += range.length;
    m.tensor_ranges_.push_back({name, range});
  }
  for (auto& t : m.tables_) {
    auto it = std::find_if(m.globals_.begin(), m.globals_.end(), [&](const auto& g) { return g.first == t.tensor; });
    DF_CHECK(it != m.globals_.end());
    t.base = it->second.offset;
    t.file = 0;
  }
  // Layers in ascending order, each one's dense image followed by its experts: a layer's bytes stay together.
  size_t li = 0, ei = 0;
  while (li < m.layers_.size() || ei < m.experts_.size()) {
    uint32_t L = std::min(li < m.layers_.size() ? m.layers_[li].layer : UINT32_MAX,
                          ei < m.experts_.size() ? m.experts_[ei].layer : UINT32_MAX);
    if (li < m.layers_.size() && m.layers_[li].layer == L) {
      auto& lr = m.layers_[li++];
      pos = align_up(pos, kRecordAlignment);
      lr.base = pos;
      for (const auto& t : lr.tensors) m.tensor_ranges_.push_back({t.name, {lr.base + t.slot_offset, t.bytes}});
      pos += lr.record_bytes;
    }
    if (ei < m.experts_.size() && m.experts_[ei].layer == L) {
      auto& el = m.experts_[ei++];
      pos = align_up(pos, kRecordAlignment);
      el.base = pos;
      el.stride = align_up(el.record_bytes, kRecordAlignment);
      pos += el.stride * el.n_experts;
    }
  }
  m.file_bytes_ = align_up(pos, kRecordAlignment);
  sort_by_name(m.tensor_ranges_);
  return m;
}

const ExpertLayerRecords* RecordMap::expert_layer(uint32_t layer) const {
  if (layer >= expert_index_.size() || expert_index_[layer] < 0) return nullptr;
  return &experts_[static_cast<size_t>(expert_index_[layer])];
}

const LayerRecord* RecordMap::layer(uint32_t layer) const {
  if (layer >= layer_index_.size() || layer_index_[layer] < 0) return nullptr;
  return &layers_[static_cast<size_t>(layer_index_[layer])];
}

Status RecordMap::parts(RecordKey key, std::vector<RecordPart>& out) const {
  out.clear();
  switch (key.kind) {
    case RecordKind::kExpert: {
      const ExpertLayerRecords* el = expert_layer(key.layer);
      if (!el) return Error{path() + ": no routed experts in layer " + std::to_string(key.layer) + " for " + key_text(key)};
      if (key.index >= el->n_experts)
        return Error{path() + ": " + key_text(key) + ": layer " + std::to_string(key.layer) + " has " +
                     std::to_string(el->n_experts) + " experts"};
      if (repacked_) {
        out.push_back({el->base + key.index * el->stride, el->record_bytes, 0, 0});
      } else {
        for (const auto& p : el->parts)
          out.push_back({p.file_offset + key.index * p.bytes, p.bytes, p.slot_offset, p.file});
      }
      return {};
    }
    case RecordKind::kLayer: {
      const LayerRecord* lr = layer(key.layer);
      if (!lr || key.index != 0) return Error{path() + ": no " + key_text(key)};
      if (repacked_) {
        out.push_back({lr->base, lr->record_bytes, 0, 0});
        return {};
      }
      for (const auto& t : lr->tensors) {
        // Tensors that follow each other both in the file and in the image become one read.
        if (!out.empty()) {
          RecordPart& last = out.back();
          if (last.file == t.file && last.file_offset + last.length == t.file_offset &&
              last.slot_offset + last.length == t.slot_offset) {
            last.length += t.bytes;
            continue;
          }
        }
        out.push_back({t.file_offset, t.bytes, t.slot_offset, t.file});
      }
      return {};
    }
    case RecordKind::kTableRow: {
      if (key.layer >= tables_.size()) return Error{path() + ": no " + key_text(key) + ": the model has " +
                                                    std::to_string(tables_.size()) + " tables"};
      const TableRecords& t = tables_[key.layer];
      if (key.index >= t.rows)
        return Error{path() + ": " + key_text(key) + ": table " + t.tensor + " has " + std::to_string(t.rows) + " rows"};
      out.push_back({t.base + key.index * t.row_bytes, t.row_bytes, 0, t.file});
      return {};
    }
  }
  return Error{path() + ": unknown record kind"};
}

uint64_t RecordMap::record_bytes(RecordKind kind, uint32_t layer_no) const {
  switch (kind) {
    case RecordKind::kExpert: {
      const ExpertLayerRecords* el = expert_layer(layer_no);
      return el ? el->record_bytes : 0;
    }
    case RecordKind::kLayer: {
      const LayerRecord* lr = layer(layer_no);
      return lr ? lr->record_bytes : 0;
    }
    case RecordKind::kTableRow: return layer_no < tables_.size() ? tables_[layer_no].row_bytes : 0;
  }
  return 0;
}

std::optional<ByteRange> RecordMap::tensor(std::string_view name) const {
  auto it = std::lower_bound(tensor_ranges_.begin(), tensor_ranges_.end(), name,
                             [](const auto& e, std::string_view n) { return e.first < n; });
  if (it == tensor_ranges_.end() || it->first != name) return std::nullopt;
  return it->second;
}

}  // namespace df::store
