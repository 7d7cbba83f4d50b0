// A tier of the record caches: a pool of equal slots holding records, each addressed by (layer, index) -- one routed
// expert of one layer, one dense layer, one row of a lookup table. A RAM tier reads its records from disk (the GGUF
// in place or a repacked store); a GPU tier copies them from the RAM tier below it. Every tier has the same three
// verbs:
//
//   acquire(layer, ids) -> Pins   the records present and pinned while the Pins live (a miss is loaded first)
//   prefetch(layer, ids)          starts loading what is missing, never blocks; dropped where no slot is free
//   stats()                       hits, misses, bytes loaded, the time the tier's loads kept its link busy
//
// A tier knows nothing of models, engines or kernels: a record is bytes, and where its parts go inside a slot is
// the caller's layout.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "diskformer/cache/slot_table.h"
#include "diskformer/util/result.h"

namespace df::cache {

class RecordTier;

// The records of one acquire, in the order asked for, pinned until the Pins die or release() runs. Move-only.
// Entry i: the slot holding ids[i] and, in a host tier, its bytes (nullptr in a device tier, whose kernels address
// slots by number).
class Pins {
 public:
  struct Entry {
    SlotHandle pin;
    SlotId slot = kNoSlot;
  };
  Pins() = default;
  Pins(RecordTier* owner, std::vector<Entry> entries) : owner_(owner), entries_(std::move(entries)) {}
  ~Pins() { release(); }
  Pins(Pins&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), entries_(std::move(o.entries_)) {}
  Pins& operator=(Pins&& o) noexcept {
    if (this != &o) {
      release();
      owner_ = std::exchange(o.owner_, nullptr);
      entries_ = std::move(o.entries_);
    }
    return *this;
  }
  Pins(const Pins&) = delete;
  Pins& operator=(const Pins&) = delete;

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  SlotId slot(size_t i) const { return entries_[i].slot; }
  const uint8_t* data(size_t i) const { return entries_[i].pin.bytes(); }
  // Unpins every record (a device tier first orders later copies into these slots after the work queued so far).
  inline void release();

 private:
  RecordTier* owner_ = nullptr;
  std::vector<Entry> entries_;
};

struct TierStats {
  CacheStats cache;         // bytes_loaded: bytes brought into this tier (from disk, or copied to the GPU)
  double load_seconds = 0;  // time the tier's loads kept its link busy, where the tier measures it (GPU copies)
  double load_GBps() const { return load_seconds > 0 ? double(cache.bytes_loaded) / load_seconds / 1e9 : 0.0; }
};

class RecordTier {
 public:
  virtual ~RecordTier() = default;
  // Makes (layer, ids[i]) present and pinned, ids distinct, at most max_acquire() of them. A host tier returns once
  // the bytes are there; a device tier once its consumer's stream is ordered after their copies. Errors: a failed
  // load (naming the record and the file), nothing kept pinned.
  virtual Result<Pins> acquire(uint32_t layer, std::span<const int32_t> ids) = 0;
  // Starts loading the records of `ids` that are neither present nor loading, as far as slots and the tier's
  // in-flight limit allow; the rest are dropped (counted). Never blocks.
  virtual void prefetch(uint32_t layer, std::span<const int32_t> ids) = 0;
  // Present and ready now; not counted as a use.
  virtual bool contains(uint32_t layer, int32_t id) const = 0;
  virtual uint32_t slots() const = 0;
  // The most records one acquire may pin: the slots, less those reads ahead may hold.
  virtual uint32_t max_acquire() const = 0;
  // Every record of the model is held for good (loaded up front, never evicted).
  virtual bool resident() const = 0;
  virtual TierStats stats() = 0;
  virtual void reset_stats() = 0;

 protected:
  friend class Pins;
  // The pins of `slots` are about to go (before they are unpinned).
  virtual void on_release(std::span<const Pins::Entry> entries) {}
};

inline void Pins::release() {
  if (owner_ && !entries_.empty()) owner_->on_release(entries_);
  entries_.clear();
  owner_ = nullptr;
}

}  // namespace df::cache
