// The GPU tier: records in device memory under a budget, copied from the RAM tier below it. A record is a few parts
// (a routed expert: gate, up and down); part p of slot s lives at plane(p) + s * stride(p), so that kernels read
// slot s of a plane exactly as they read expert s of a stacked tensor. A slot holds its parts one after another (each
// at a multiple of 256 bytes), as the RAM tier's image does where the parts' sizes are such multiples: then a record
// is one copy. Admission by use count (admission.h).
//
//   acquire(layer, ids):  hits are pinned; misses are read from the RAM tier (its pins held until their copies are
//                         done) and copied on the tier's own stream; the consumer stream waits for those copies and
//                         for earlier reads ahead of the slots it gets, by event.
//   Pins::release():      records an event on the consumer stream; a later copy into one of those slots waits for
//                         it, so a copy never waits for work it does not depend on (the next group's copies overlap
//                         this group's kernels).
//   prefetch(layer, ids): copies records the RAM tier holds into evictable slots, without waiting for anything.
//
// No kernels, no models: the caller says where each part lies inside the RAM tier's slot image.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "diskformer/cache/admission.h"
#include "diskformer/cache/planes.h"
#include "diskformer/cache/tier.h"
#include "diskformer/cudart/buffer.h"
#include "diskformer/util/result.h"

namespace df::cache {

struct DeviceTierOptions {
  uint32_t n_layers = 0, n_index = 0;  // records (layer, index), keys layer * n_index + index
  uint32_t slots = 0;
  // parts[layer][p]: every layer with records has the same number of parts; a layer without records has none.
  std::vector<std::vector<PartPlace>> parts;
  cudaStream_t consumer = nullptr;  // the stream whose kernels read the slots
  uint32_t spill = 0;               // slots of the admission's spill part (admission.h); 0: plain LRU
  uint32_t max_prefetch = 16;       // records read ahead whose copies are in flight, at most
};

class DeviceTier final : public RecordTier {
 public:
  // `upstream` must outlive the tier. Errors: no parts, not enough device memory (with the sizes).
  static Result<std::unique_ptr<DeviceTier>> create(RecordTier& upstream, const DeviceTierOptions& options);
  ~DeviceTier() override;
  DeviceTier(const DeviceTier&) = delete;
  DeviceTier& operator=(const DeviceTier&) = delete;

  Result<Pins> acquire(uint32_t layer, std::span<const int32_t> ids) override;
  void prefetch(uint32_t layer, std::span<const int32_t> ids) override;
  bool contains(uint32_t layer, int32_t id) const override { return table_.contains(key(layer, id)); }
  uint32_t slots() const override { return table_.size(); }
  uint32_t max_acquire() const override { return table_.size(); }
  bool resident() const override { return false; }
  TierStats stats() override;
  void reset_stats() override;

  size_t n_parts() const { return offsets_.size(); }
  const uint8_t* plane(size_t p) const { return pool_.as<uint8_t>() + offsets_[p]; }
  uint64_t stride(size_t) const { return slot_bytes_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t device_bytes() const { return pool_.size(); }
  // Seconds per byte of the copies timed so far (never waits); 0 before any.
  double copy_s_per_byte() const { return timed_bytes_ && timed_s_ > 0 ? timed_s_ / double(timed_bytes_) : 0.0; }

 private:
  DeviceTier(RecordTier& upstream, const DeviceTierOptions& o);
  Key key(uint32_t layer, int32_t id) const { return uint64_t(layer) * options_.n_index + uint32_t(id); }
  struct Copy {
    AdmissionTable::Acquired slot;
    int32_t id = 0;
  };
  // Copies the records of `copies` (layer `layer`) from the RAM tier into their slots, in batches the RAM tier can
  // pin at once. Marks each slot loaded (or failed).
  Status copy_in(uint32_t layer, std::span<const Copy> copies, bool prefetch);
  // Times and unpins the batches whose copies have finished; with wait, waits for all of them first.
  void reap(bool wait);
  void on_release(std::span<const Pins::Entry> entries) override;

  static constexpr int kBatches = 16;    // copy batches in flight at most (a ring of event pairs)
  static constexpr int kUseEvents = 16;  // ring of "kernels done with these slots" events on the consumer stream

  RecordTier& upstream_;
  DeviceTierOptions options_;
  AdmissionTable table_;
  cuda::DeviceBuffer pool_;            // [slots][slot_bytes_]
  std::vector<uint64_t> offsets_;      // [part]: its place in a slot
  uint64_t slot_bytes_ = 0;
  std::vector<bool> whole_;            // [layer]: the RAM image lays the parts out as a slot does

  cudaStream_t copy_stream_ = nullptr;
  struct Batch {
    cudaEvent_t start = nullptr, done = nullptr;
    uint64_t seq = 0;   // 0: free
    uint64_t bytes = 0;
    uint32_t prefetched = 0;  // records of a read ahead
    Pins source;        // the RAM tier's records being copied
  };
  std::array<Batch, kBatches> batches_;
  uint64_t next_seq_ = 1, done_seq_ = 0;  // copies up to done_seq_ are known finished
  std::vector<uint64_t> ready_seq_;       // per slot: the batch that filled it
  std::array<cudaEvent_t, kUseEvents> use_events_{};
  int next_use_event_ = 0;
  std::vector<int> last_use_;  // per slot: the use event after the kernels that last read it; -1 none
  uint32_t prefetch_in_flight_ = 0;  // records read ahead whose batches are not reaped
  double timed_s_ = 0;
  uint64_t timed_bytes_ = 0;
  std::vector<Copy> misses_;
  std::vector<int32_t> ids_;
};

}  // namespace df::cache
