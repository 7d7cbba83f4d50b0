#include "diskformer/backend/cuda/expert_cache.h"

#include <algorithm>

#include "diskformer/util/check.h"
#include "diskformer/util/size.h"

namespace df::cuda {

namespace {

constexpr uint64_t kAlign = 256;  // slot matrices start on 256-byte boundaries (vector loads, cache lines)
// Use counts halve after this many lookups per (layer, expert) record: a few tokens' worth of decode.
constexpr uint64_t kDecayLookupsPerRecord = 2;

uint64_t round_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

struct Layout {
  model::Mat gate, up, down;  // expert 0 of layer 0: the prototype of every record
};

Result<Layout> probe(const model::ModelSpec& spec, model::WeightSource& source) {
  if (!spec.moe()) return Error{"GPU expert cache: the model has no routed experts"};
  const int32_t zero = 0;
  DF_ASSIGN(std::vector<model::ExpertWeights> ew, source.experts(0, std::span<const int32_t>(&zero, 1)));
  DF_CHECK(ew.size() == 1);
  Layout l{ew[0].gate, ew[0].up, ew[0].down};
  const int64_t E = spec.n_embd, F = spec.n_ff_expert;
  const std::pair<const model::Mat*, const char*> parts[] = {{&l.gate, "ffn_gate_exps"},
                                                             {&l.up, "ffn_up_exps"},
                                                             {&l.down, "ffn_down_exps"}};
  for (const auto& [m, name] : parts) {
    const bool down = m == &l.down;
    if (m->rows != (down ? E : F) || m->cols != (down ? F : E))
      return Error{std::string("blk.0.") + name + ": one expert is " + std::to_string(m->rows) + " x " +
                   std::to_string(m->cols) + ", the spec needs " + std::to_string(down ? E : F) + " x " +
                   std::to_string(down ? F : E)};
    if (!matmul_type_supported(m->type))
      return Error{std::string("blk.0.") + name + ": weight type " + std::to_string(unsigned(m->type)) +
                   " has no CUDA kernel (F32, F16, BF16, Q8_0, Q4_0 do)"};
  }
  return l;
}

DMat dmat(const model::Mat& m, const uint8_t* data) { return {m.type, data, m.cols, m.rows, m.row_bytes}; }

}  // namespace

Result<uint64_t> GpuExpertCache::slot_bytes(const model::ModelSpec& spec, model::WeightSource& source) {
  DF_ASSIGN(Layout l, probe(spec, source));
  uint64_t total = 0;
  for (const model::Mat* m : {&l.gate, &l.up, &l.down}) total += round_up(m->row_bytes * uint64_t(m->rows));
  return total;
}

Result<std::unique_ptr<GpuExpertCache>> GpuExpertCache::create(const model::ModelSpec& spec,
                                                               model::WeightSource& source, uint32_t slots) {
  if (slots == 0) return Error{"GPU expert cache: zero slots"};
  DF_ASSIGN(Layout l, probe(spec, source));
  // The spill part passes the experts not admitted: two tokens' experts of a layer (a decode step's group), up to
  // an eighth of the slots, never more than half.
  const uint32_t spill = std::min(slots / 2, std::max(2 * spec.n_expert_used, slots / 8));
  std::unique_ptr<GpuExpertCache> c(new GpuExpertCache(spec, source, slots, spill));
  c->gate_stride_ = round_up(l.gate.row_bytes * uint64_t(l.gate.rows));
  c->up_stride_ = round_up(l.up.row_bytes * uint64_t(l.up.rows));
  c->down_stride_ = round_up(l.down.row_bytes * uint64_t(l.down.rows));
  DF_ASSIGN(c->pool_, DeviceBuffer::alloc(c->slot_bytes() * slots,
                                          std::to_string(slots) + " GPU expert slots of " +
                                              format_size(c->slot_bytes())));
  uint8_t* base = c->pool_.as<uint8_t>();
  c->gate_ = dmat(l.gate, base);
  c->up_ = dmat(l.up, base + c->gate_stride_ * slots);
  c->down_ = dmat(l.down, base + (c->gate_stride_ + c->up_stride_) * slots);
  DF_CUDA_CHECK(cudaStreamCreateWithFlags(&c->copy_stream_, cudaStreamNonBlocking));
  DF_CUDA_CHECK(cudaEventCreate(&c->copy_start_));
  DF_CUDA_CHECK(cudaEventCreate(&c->copy_done_));
  for (cudaEvent_t& e : c->use_events_) DF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return c;
}

GpuExpertCache::~GpuExpertCache() {
  held_.clear();
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  for (cudaEvent_t e : use_events_)
    if (e) cudaEventDestroy(e);
  if (copy_start_) cudaEventDestroy(copy_start_);
  if (copy_done_) cudaEventDestroy(copy_done_);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
}

cache::SlotTable& GpuExpertCache::admit(cache::Key key) {
  if (spill_.size() == 0) return main_;
  cache::Key victim = 0;
  cache::SlotTable* pick = &spill_;  // also when every main slot is pinned
  if (main_.has_free_slot()) {
    pick = &main_;
  } else if (main_.next_victim(&victim)) {
    // Strictly more uses than the victim: a cycle of equally used experts leaves the main part as it is.
    pick = uses_[key] > uses_[victim] ? &main_ : &spill_;
  }
  // A part whose slots are all pinned or loading cannot take it; the other one does.
  if (!pick->has_free_slot() && !pick->next_victim(&victim)) return pick == &main_ ? spill_ : main_;
  return *pick;
}

Status GpuExpertCache::acquire(uint32_t il, std::span<const int32_t> experts, std::span<int32_t> slots,
                               cudaStream_t compute) {
  DF_CHECK(slots.size() == experts.size() && il < spec_.n_layer);
  miss_.clear();
  const uint64_t decay_every = kDecayLookupsPerRecord * uses_.size();
  for (size_t i = 0; i < experts.size(); ++i) {
    const int32_t e = experts[i];
    DF_CHECK(e >= 0 && uint32_t(e) < spec_.n_expert);
    const cache::Key key = uint64_t(il) * spec_.n_expert + uint32_t(e);
    if (uses_[key] < UINT16_MAX) ++uses_[key];
    if (++lookups_ % decay_every == 0)
      for (uint16_t& u : uses_) u /= 2;
    // Present in either part: a hit there. Otherwise the admission decides where it is loaded.
    cache::SlotTable* t = spill_.find(key) != cache::kNoSlot ? &spill_ : main_.find(key) != cache::kNoSlot ? &main_
                                                                                                           : &admit(key);
    const cache::SlotTable::Acquired a = t->acquire(key);
    // More experts than unpinned slots is the caller's bug: it sizes its groups by slots().
    DF_CHECK(a.outcome != cache::SlotTable::Outcome::kFull);
    const cache::SlotId global = a.slot + (t == &spill_ ? main_.size() : 0);
    held_.push_back({cache::SlotHandle(t, a.slot, nullptr, slot_bytes()), global});
    slots[i] = int32_t(global);
    if (a.outcome == cache::SlotTable::Outcome::kMiss) miss_.push_back({t, a.slot, global, e});
  }
  if (!miss_.empty()) DF_TRY(copy_misses(il, compute));
  return {};
}

Status GpuExpertCache::copy_misses(uint32_t il, cudaStream_t compute) {
  // The source's views stay valid only until its next experts() call (a streaming source reuses its buffers): the
  // previous batch must have left them before asking again.
  collect_timing();
  const uint32_t per_call = source_.max_experts_per_call() ? source_.max_experts_per_call() : uint32_t(miss_.size());
  std::vector<int32_t> ids;
  for (size_t c0 = 0; c0 < miss_.size(); c0 += per_call) {
    const size_t c1 = std::min(miss_.size(), c0 + per_call);
    ids.clear();
    for (size_t i = c0; i < c1; ++i) ids.push_back(miss_[i].expert);
    Result<std::vector<model::ExpertWeights>> got = source_.experts(il, ids);
    if (!got) {
      for (size_t i = c0; i < miss_.size(); ++i) miss_[i].table->loaded(miss_[i].local, false, 0);
      held_.clear();
      return got.error();
    }
    // A slot read by earlier kernels is overwritten only after them.
    int waited = -1;
    for (size_t i = c0; i < c1; ++i) {
      const int u = last_use_[miss_[i].slot];
      if (u >= 0 && u != waited) DF_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, use_events_[u], 0));
      waited = u;
    }
    DF_CUDA_CHECK(cudaEventRecord(copy_start_, copy_stream_));
    for (size_t i = c0; i < c1; ++i) {
      const cache::SlotId s = miss_[i].slot;
      const model::ExpertWeights& w = (*got)[i - c0];
      const std::pair<const model::Mat*, std::pair<const DMat*, uint64_t>> parts[] = {
          {&w.gate, {&gate_, gate_stride_}}, {&w.up, {&up_, up_stride_}}, {&w.down, {&down_, down_stride_}}};
      uint64_t bytes = 0;
      for (const auto& [m, dst] : parts) {
        const DMat& d = *dst.first;
        if (m->type != d.type || m->rows != d.rows || m->cols != d.cols || m->row_bytes != d.row_bytes)
          return Error{"blk." + std::to_string(il) + ": expert " + std::to_string(miss_[i].expert) +
                       " differs in type or shape from layer 0's experts; the GPU expert cache needs one layout"};
        const uint64_t n = m->row_bytes * uint64_t(m->rows);
        DF_CUDA_CHECK(cudaMemcpyAsync(const_cast<uint8_t*>(d.data) + uint64_t(s) * dst.second, m->data, n,
                                      cudaMemcpyHostToDevice, copy_stream_));
        bytes += n;
      }
      miss_[i].table->loaded(miss_[i].local, true, bytes);
    }
    DF_CUDA_CHECK(cudaEventRecord(copy_done_, copy_stream_));
    copies_in_flight_ = true;
    if (c1 < miss_.size()) collect_timing();  // the next experts() call may reuse these views
  }
  DF_CUDA_CHECK(cudaStreamWaitEvent(compute, copy_done_, 0));
  return {};
}

void GpuExpertCache::release(cudaStream_t compute) {
  if (held_.empty()) return;
  const int u = next_use_event_;
  next_use_event_ = (next_use_event_ + 1) % kUseEvents;
  // Re-recording an event some slot still names only makes a later copy wait for later kernels: safe.
  DF_CUDA_CHECK(cudaEventRecord(use_events_[u], compute));
  for (const Held& h : held_) last_use_[h.slot] = u;
  held_.clear();
}

void GpuExpertCache::collect_timing() {
  if (!copies_in_flight_) return;
  DF_CUDA_CHECK(cudaEventSynchronize(copy_done_));
  float ms = 0;
  DF_CUDA_CHECK(cudaEventElapsedTime(&ms, copy_start_, copy_done_));
  h2d_seconds_ += ms / 1e3;
  copies_in_flight_ = false;
}

ExpertCacheStats GpuExpertCache::stats() {
  collect_timing();
  cache::CacheStats s = main_.stats();
  const cache::CacheStats& t = spill_.stats();
  s.hits += t.hits, s.late_hits += t.late_hits, s.misses += t.misses, s.evictions += t.evictions;
  s.bytes_loaded += t.bytes_loaded, s.load_errors += t.load_errors;
  return {s, h2d_seconds_};
}

void GpuExpertCache::reset_stats() {
  collect_timing();
  main_.stats() = spill_.stats() = cache::CacheStats{};
  h2d_seconds_ = 0;
}

}  // namespace df::cuda
