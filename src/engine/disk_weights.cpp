#include "diskformer/engine/disk_weights.h"

#include <algorithm>

#include "diskformer/io/reader.h"
#include "diskformer/util/check.h"

namespace df::engine {

namespace {

constexpr uint64_t kPage = io::kDirectAlignment;
constexpr uint64_t kReadPiece = 8u << 20;  // resident tensors are read in pieces of this size, many in flight

uint64_t place(uint64_t at, const gguf::TensorInfo* t) { return place_piece(at, t->offset, t->n_bytes); }

}  // namespace

Result<std::unique_ptr<DiskWeights>> DiskWeights::open(const gguf::File& file, const model::ModelSpec& spec,
                                                       const model::ModelTensors& t, const WeightPlan& plan,
                                                       io::HostAllocator* allocator) {
  std::unique_ptr<DiskWeights> w(
      new DiskWeights(file, spec, t, plan, allocator ? *allocator : io::default_host_allocator()));
  std::vector<const gguf::TensorInfo*> list = {t.token_embd, t.output_norm};
  if (t.output != t.token_embd) list.push_back(t.output);
  if (plan.mode != Residency::kStreamLayers)
    for (const auto& l : t.layers) {
      for (auto* x : l.dense()) list.push_back(x);
      if (l.moe() && plan.mode == Residency::kAllResident)
        for (auto* x : {l.gate_exps, l.up_exps, l.down_exps}) list.push_back(x);
    }
  DF_TRY(w->load_resident(list));
  w->token_embd_ = w->resident(t.token_embd);
  w->output_norm_ = w->resident(t.output_norm);
  w->output_ = w->resident(t.output);
  if (plan.mode != Residency::kStreamLayers)
    for (const auto& l : t.layers) {
      model::LayerWeights lw;
      auto r = [&](const gguf::TensorInfo* x) { return x ? w->resident(x) : model::Mat{}; };
      lw.attn_norm = r(l.attn_norm), lw.wq = r(l.wq), lw.wk = r(l.wk), lw.wv = r(l.wv), lw.wo = r(l.wo);
      lw.q_norm = r(l.q_norm), lw.k_norm = r(l.k_norm), lw.ffn_norm = r(l.ffn_norm);
      lw.ffn_gate = r(l.ffn_gate), lw.ffn_up = r(l.ffn_up), lw.ffn_down = r(l.ffn_down);
      lw.gate_inp = r(l.gate_inp);
      w->layers_.push_back(lw);
    }
  if (plan.mode != Residency::kAllResident) DF_TRY(w->create_pool());
  return w;
}

Status DiskWeights::load_resident(const std::vector<const gguf::TensorInfo*>& list) {
  uint64_t at = 0;
  for (auto* t : list) {
    if (arena_offset_.count(t)) continue;
    at = place(at, t);
    arena_offset_[t] = at;
    at += t->n_bytes;
  }
  DF_ASSIGN(arena_, io::AlignedBuffer::allocate(std::max<uint64_t>(at, kPage), kPage, allocator_));
  DF_ASSIGN(auto reader, io::Reader::create({}));
  DF_ASSIGN(io::FileId fid, reader->open(file_.path));
  std::vector<io::ReadRequest> reqs;
  for (const auto& [t, off] : arena_offset_) {
    if (t->offset + t->n_bytes > reader->file(fid).size)
      return Error{file_.path + ": tensor " + t->name + " data at offset " + std::to_string(t->offset) + " + " +
                   std::to_string(t->n_bytes) + " bytes runs past the end of the file (" +
                   std::to_string(reader->file(fid).size) + " bytes)"};
    for (uint64_t p = 0; p < t->n_bytes; p += kReadPiece)
      reqs.push_back({.file = fid,
                      .offset = t->offset + p,
                      .length = std::min(kReadPiece, t->n_bytes - p),
                      .dst = arena_.data() + off + p});
  }
  DF_TRY(reader->read_batch(reqs));
  resident_read_ = reader->stats().bytes;
  return {};
}

model::Mat DiskWeights::resident(const gguf::TensorInfo* t) const {
  auto it = arena_offset_.find(t);
  DF_CHECK(it != arena_offset_.end());
  return model::mat_of(*t, arena_.data() + it->second);
}

Status DiskWeights::locate(cache::Key key, std::vector<cache::Extent>& out) const {
  uint64_t at = 0;
  auto add = [&](uint64_t offset, uint64_t length) {
    at = place_piece(at, offset, length);
    out.push_back({.file = pool_file_, .offset = offset, .length = length, .slot_offset = at});
    at += length;
  };
  if (plan_.mode == Residency::kStreamLayers) {
    if (key >= tensors_.layers.size()) return Error{"no layer " + std::to_string(key)};
    for (auto* t : tensors_.layers[key].dense()) add(t->offset, t->n_bytes);
  } else {
    const uint64_t il = key / spec_.n_expert, e = key % spec_.n_expert;
    if (il >= tensors_.layers.size()) return Error{"no expert record " + std::to_string(key)};
    for (auto* t : {tensors_.layers[il].gate_exps, tensors_.layers[il].up_exps, tensors_.layers[il].down_exps}) {
      const uint64_t per = t->n_bytes / spec_.n_expert;
      add(t->offset + e * per, per);
    }
  }
  DF_CHECK(at <= plan_.record_bytes);
  return {};
}

Status DiskWeights::create_pool() {
  DF_ASSIGN(auto reader, io::Reader::create({}));
  DF_ASSIGN(pool_file_, reader->open(file_.path));
  cache::SlotPoolOptions o;
  o.slots = plan_.slots;
  o.slot_bytes = plan_.record_bytes;
  o.allocator = &allocator_;
  // Layers: the next one. Experts: the next layer's guessed top-k for a token or two (the browser original's
  // lookahead of one layer).
  // A quarter of the pool at most, so that reads ahead never hold the slots a layer's own experts need.
  o.max_prefetch = plan_.mode == Residency::kStreamLayers ? 1 : std::max<uint32_t>(1, std::min(2 * spec_.n_expert_used, plan_.slots / 4));
  max_prefetch_ = o.max_prefetch;
  DF_ASSIGN(pool_, cache::HostSlotPool::create(
                       std::move(reader), [this](cache::Key k, std::vector<cache::Extent>& out) { return locate(k, out); },
                       o));
  return {};
}

model::LayerWeights DiskWeights::layer_views(const model::LayerTensors& l, const uint8_t* slot) const {
  model::LayerWeights lw;
  uint64_t at = 0;
  auto v = [&](const gguf::TensorInfo* t) {
    if (!t) return model::Mat{};
    at = place(at, t);
    model::Mat m = model::mat_of(*t, slot + at);
    at += t->n_bytes;
    return m;
  };
  // Field order is LayerTensors::dense()'s, the order locate() lays the tensors out in.
  lw.attn_norm = v(l.attn_norm), lw.wq = v(l.wq), lw.wk = v(l.wk), lw.wv = v(l.wv), lw.wo = v(l.wo);
  lw.q_norm = v(l.q_norm), lw.k_norm = v(l.k_norm), lw.ffn_norm = v(l.ffn_norm);
  lw.ffn_gate = v(l.ffn_gate), lw.ffn_up = v(l.ffn_up), lw.ffn_down = v(l.ffn_down);
  lw.gate_inp = v(l.gate_inp);
  return lw;
}

Result<const model::LayerWeights*> DiskWeights::layer(uint32_t il) {
  if (plan_.mode != Residency::kStreamLayers) return &layers_[il];
  layer_handle_.release();
  DF_ASSIGN(layer_handle_, pool_->get(il));
  // The next layer (the first again after the last: the next token starts there) is read while this one computes.
  const cache::Key next = (il + 1) % spec_.n_layer;
  pool_->prefetch(std::span<const cache::Key>(&next, 1));
  streamed_layer_ = layer_views(tensors_.layers[il], layer_handle_.bytes());
  return &streamed_layer_;
}

Result<std::vector<model::ExpertWeights>> DiskWeights::experts(uint32_t il, std::span<const int32_t> ids) {
  const model::LayerTensors& l = tensors_.layers[il];
  std::vector<model::ExpertWeights> out;
  out.reserve(ids.size());
  const int64_t F = spec_.n_ff_expert;
  if (plan_.mode == Residency::kAllResident) {
    const model::Mat g = resident(l.gate_exps), u = resident(l.up_exps), d = resident(l.down_exps);
    const int64_t E = spec_.n_embd;
    for (int32_t e : ids) out.push_back({g.slice(e * F, F), u.slice(e * F, F), d.slice(e * E, E)});
    return out;
  }
  expert_handles_.clear();
  std::vector<cache::Key> keys;
  for (int32_t e : ids) keys.push_back(uint64_t(il) * spec_.n_expert + uint64_t(e));
  DF_ASSIGN(expert_handles_, pool_->get_many(keys));
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint8_t* slot = expert_handles_[i].bytes();
    uint64_t at = 0;
    model::Mat m[3];
    const gguf::TensorInfo* ts[3] = {l.gate_exps, l.up_exps, l.down_exps};
    for (int j = 0; j < 3; ++j) {
      const uint64_t per = ts[j]->n_bytes / spec_.n_expert;
      at = place_piece(at, ts[j]->offset + uint64_t(ids[i]) * per, per);
      model::Mat full = model::mat_of(*ts[j], slot + at);
      const int64_t rows = full.rows / spec_.n_expert;
      m[j] = full.slice(0, rows);
      at += per;
    }
    out.push_back({m[0], m[1], m[2]});
  }
  return out;
}

void DiskWeights::prefetch_experts(uint32_t il, std::span<const int32_t> ids) {
  if (!pool_ || plan_.mode != Residency::kStreamExperts) return;
  std::vector<cache::Key> keys;
  for (int32_t e : ids) keys.push_back(uint64_t(il) * spec_.n_expert + uint64_t(e));
  pool_->poll();
  pool_->prefetch(keys);
}

uint32_t DiskWeights::max_experts_per_call() const {
  // The slots that reads ahead may be filling are not available to a call.
  return plan_.mode == Residency::kStreamExperts ? plan_.slots - max_prefetch_ : 0;
}

DiskStats DiskWeights::stats() const {
  DiskStats s;
  s.resident_bytes_read = resident_read_;
  if (pool_) {
    s.cache = pool_->stats();
    s.streamed_bytes_read = s.cache.bytes_loaded;
  }
  return s;
}

void DiskWeights::reset_stream_stats() {
  if (pool_) pool_->reset_stats();
}

}  // namespace df::engine
