#include "diskformer/cache/cuda/device_tier.h"

#include <algorithm>

#include "diskformer/cudart/check.h"
#include "diskformer/util/check.h"
#include "diskformer/util/size.h"

namespace df::cache {

DeviceTier::DeviceTier(RecordTier& upstream, const DeviceTierOptions& o)
    : upstream_(upstream), options_(o), table_(o.slots, o.spill, uint64_t(o.n_layers) * o.n_index),
      ready_seq_(o.slots, 0), last_use_(o.slots, -1) {}

Result<std::unique_ptr<DeviceTier>> DeviceTier::create(RecordTier& upstream, const DeviceTierOptions& o) {
  if (o.slots == 0) return Error{"GPU tier: zero slots"};
  if (o.spill >= o.slots) return Error{"GPU tier: a spill part of " + std::to_string(o.spill) + " of " +
                                       std::to_string(o.slots) + " slots leaves no main part"};
  if (o.parts.size() != o.n_layers) return Error{"GPU tier: parts given for " + std::to_string(o.parts.size()) +
                                                 " layers, the records have " + std::to_string(o.n_layers)};
  size_t n_parts = 0;
  for (const auto& l : o.parts) {
    if (l.empty()) continue;
    if (n_parts && l.size() != n_parts) return Error{"GPU tier: layers differ in the parts of their records"};
    n_parts = l.size();
  }
  if (n_parts == 0) return Error{"GPU tier: the records have no parts"};
  std::unique_ptr<DeviceTier> t(new DeviceTier(upstream, o));
  // The parts one after another in each slot, each at a multiple of 256 bytes.
  for (uint64_t s : plane_strides(o.parts)) {
    t->offsets_.push_back(t->slot_bytes_);
    t->slot_bytes_ += s;
  }
  for (const std::vector<PartPlace>& l : o.parts) {
    bool whole = !l.empty();
    for (size_t p = 0; p < l.size(); ++p) whole = whole && l[p].offset - l[0].offset == t->offsets_[p];
    t->whole_.push_back(whole);
  }
  const uint64_t slot = t->slot_bytes_;
  DF_ASSIGN(t->pool_, cuda::DeviceBuffer::alloc(slot * o.slots, std::to_string(o.slots) + " GPU record slots of " +
                                                                     format_size(slot)));
  DF_CUDA_CHECK(cudaStreamCreateWithFlags(&t->copy_stream_, cudaStreamNonBlocking));
  for (Batch& b : t->batches_) {
    DF_CUDA_CHECK(cudaEventCreate(&b.start));
    DF_CUDA_CHECK(cudaEventCreate(&b.done));
  }
  for (cudaEvent_t& e : t->use_events_) DF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return t;
}

DeviceTier::~DeviceTier() {
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  for (Batch& b : batches_) {
    b.source.release();
    if (b.start) cudaEventDestroy(b.start);
    if (b.done) cudaEventDestroy(b.done);
  }
  for (cudaEvent_t e : use_events_)
    if (e) cudaEventDestroy(e);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
}

void DeviceTier::reap(bool wait) {
  // Batches finish in the order of their sequence numbers (one copy stream).
  for (;;) {
    Batch* oldest = nullptr;
    for (Batch& b : batches_)
      if (b.seq && (!oldest || b.seq < oldest->seq)) oldest = &b;
    if (!oldest) return;
    if (wait) {
      DF_CUDA_CHECK(cudaEventSynchronize(oldest->done));
    } else {
      const cudaError_t q = cudaEventQuery(oldest->done);
      if (q == cudaErrorNotReady) return;
      DF_CUDA_CHECK(q);
    }
    float ms = 0;
    DF_CUDA_CHECK(cudaEventElapsedTime(&ms, oldest->start, oldest->done));
    timed_s_ += ms / 1e3;
    timed_bytes_ += oldest->bytes;
    prefetch_in_flight_ -= oldest->prefetched;
    done_seq_ = oldest->seq;
    oldest->source.release();
    oldest->seq = 0;
  }
}

Status DeviceTier::copy_in(uint32_t layer, std::span<const Copy> copies, bool prefetch) {
  const std::vector<PartPlace>& parts = options_.parts[layer];
  DF_CHECK(!parts.empty());
  const uint32_t per_batch = std::max<uint32_t>(1, upstream_.max_acquire());
  uint64_t bytes = 0;  // of a record
  for (const PartPlace& part : parts) bytes += part.bytes;
  for (size_t c0 = 0; c0 < copies.size(); c0 += per_batch) {
    const size_t c1 = std::min(copies.size(), c0 + per_batch);
    // A RAM tier that evicts has only so many slots: the records of earlier batches leave it first.
    reap(/*wait=*/!upstream_.resident());
    ids_.clear();
    for (size_t i = c0; i < c1; ++i) ids_.push_back(copies[i].id);
    Result<Pins> src = upstream_.acquire(layer, ids_);
    if (!src) {
      for (size_t i = c0; i < copies.size(); ++i) AdmissionTable::loaded(copies[i].slot, false, 0);
      return src.take_error();
    }
    // A free batch (its event pair): the oldest in flight finishes first.
    Batch* b = nullptr;
    while (!b) {
      for (Batch& x : batches_)
        if (!x.seq) b = &x;
      if (!b) reap(/*wait=*/true);
    }
    // A slot read by earlier kernels is overwritten only after them.
    int waited = -1;
    for (size_t i = c0; i < c1; ++i) {
      const int u = last_use_[copies[i].slot.slot];
      if (u >= 0 && u != waited) DF_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, use_events_[size_t(u)], 0));
      waited = u;
    }
    DF_CUDA_CHECK(cudaEventRecord(b->start, copy_stream_));
    uint64_t batch_bytes = 0;
    for (size_t i = c0; i < c1; ++i) {
      const SlotId s = copies[i].slot.slot;
      const uint8_t* image = src->data(i - c0);
      uint8_t* slot = pool_.as<uint8_t>() + uint64_t(s) * slot_bytes_;
      // A copy call costs the host microseconds, and a streamed decode step makes dozens a layer: a record whose
      // image lays its parts out as the slot does comes in one.
      if (whole_[layer]) {
        DF_CUDA_CHECK(cudaMemcpyAsync(slot, image + parts[0].offset, offsets_.back() + parts.back().bytes,
                                      cudaMemcpyHostToDevice, copy_stream_));
      } else {
        for (size_t p = 0; p < parts.size(); ++p)
          DF_CUDA_CHECK(cudaMemcpyAsync(slot + offsets_[p], image + parts[p].offset, parts[p].bytes,
                                        cudaMemcpyHostToDevice, copy_stream_));
      }
      ready_seq_[s] = next_seq_;
      AdmissionTable::loaded(copies[i].slot, true, bytes);
      batch_bytes += bytes;
    }
    DF_CUDA_CHECK(cudaEventRecord(b->done, copy_stream_));
    b->seq = next_seq_++;
    b->bytes = batch_bytes;
    b->prefetched = prefetch ? uint32_t(c1 - c0) : 0;
    b->source = std::move(*src);
    if (prefetch) prefetch_in_flight_ += b->prefetched;
  }
  return {};
}

Result<Pins> DeviceTier::acquire(uint32_t layer, std::span<const int32_t> ids) {
  DF_CHECK(layer < options_.n_layers && ids.size() <= table_.size());
  reap(/*wait=*/false);
  misses_.clear();
  std::vector<Pins::Entry> entries;
  entries.reserve(ids.size());
  uint64_t wait_for = 0;  // the latest copy batch a pinned slot depends on
  for (int32_t id : ids) {
    DF_CHECK(id >= 0 && uint32_t(id) < options_.n_index);
    const AdmissionTable::Acquired a = table_.acquire(key(layer, id));
    // More records than unpinned slots is the caller's bug: it sizes its groups by slots().
    DF_CHECK(a.outcome != SlotTable::Outcome::kFull);
    entries.push_back({SlotHandle(a.table, a.local, nullptr, slot_bytes_), a.slot});
    if (a.outcome == SlotTable::Outcome::kMiss) {
      misses_.push_back({a, id});
    } else if (ready_seq_[a.slot] > done_seq_) {
      wait_for = std::max(wait_for, ready_seq_[a.slot]);  // filled by a read ahead still copying
    }
  }
  if (!misses_.empty()) {
    Status st = copy_in(layer, misses_, /*prefetch=*/false);
    if (!st.ok()) return st.take_error();  // the entries' pins go with them
    wait_for = next_seq_ - 1;
  }
  if (wait_for > done_seq_) {
    // Copies finish in order: waiting for the batch of wait_for covers every earlier one.
    for (const Batch& b : batches_)
      if (b.seq == wait_for) DF_CUDA_CHECK(cudaStreamWaitEvent(options_.consumer, b.done, 0));
  }
  return Pins(this, std::move(entries));
}

void DeviceTier::prefetch(uint32_t layer, std::span<const int32_t> ids) {
  if (layer >= options_.n_layers || options_.parts[layer].empty()) return;
  reap(/*wait=*/false);
  // A RAM tier that evicts lends its slots only once earlier copies are done: a read ahead does not wait for that.
  if (!upstream_.resident())
    for (const Batch& b : batches_)
      if (b.seq) return;
  misses_.clear();
  for (int32_t id : ids) {
    if (id < 0 || uint32_t(id) >= options_.n_index) continue;
    const Key k = key(layer, id);
    if (table_.find(k) != kNoSlot) continue;
    // Only what the RAM tier holds now: a read ahead never waits for the disk.
    if (prefetch_in_flight_ + misses_.size() >= options_.max_prefetch || !upstream_.contains(layer, id)) continue;
    const AdmissionTable::Acquired a = table_.claim_for_prefetch(k);
    if (a.slot == kNoSlot) continue;
    misses_.push_back({a, id});
  }
  if (!misses_.empty() && misses_.size() <= upstream_.max_acquire()) {
    // A failed read ahead leaves its slots free again; the acquire that needs the record reports the error.
    (void)copy_in(layer, misses_, /*prefetch=*/true);
  } else {
    for (const Copy& c : misses_) AdmissionTable::loaded(c.slot, false, 0);
  }
}

void DeviceTier::on_release(std::span<const Pins::Entry> entries) {
  const int u = next_use_event_;
  next_use_event_ = (next_use_event_ + 1) % kUseEvents;
  // Re-recording an event some slot still names only makes a later copy wait for later kernels: safe.
  DF_CUDA_CHECK(cudaEventRecord(use_events_[size_t(u)], options_.consumer));
  for (const Pins::Entry& e : entries) last_use_[e.slot] = u;
}

TierStats DeviceTier::stats() {
  reap(/*wait=*/true);
  return {table_.stats(), timed_s_};
}

void DeviceTier::reset_stats() {
  reap(/*wait=*/true);
  table_.reset_stats();
  timed_s_ = 0;
  timed_bytes_ = 0;
}

}  // namespace df::cache
