// The RAM tier: records in aligned host memory (pinned where a GPU copies from it), read from disk through a
// HostSlotPool. Record (layer, index) is the pool's key layer * n_index + index; the Locator says where its bytes
// are (a store::RecordMap in place or repacked), extent by extent, and where each goes inside the slot.
//
// Resident: one slot per record, every record read at creation and never evicted -- what a run without a RAM
// budget keeps; acquire() is then a lookup. Otherwise the slots are a cache (LRU) that reads misses on demand and
// reads ahead what prefetch() names.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "diskformer/cache/slot_pool.h"
#include "diskformer/cache/tier.h"
#include "diskformer/io/reader.h"

namespace df::cache {

struct HostTierOptions {
  uint32_t n_layers = 0;    // layers of records (keys layer * n_index + index)
  uint32_t n_index = 0;     // records per layer (experts per layer, 1 for dense layers)
  uint32_t slots = 0;       // resident: ignored (one per record)
  uint64_t slot_bytes = 0;  // the largest record
  bool resident = false;
  uint32_t max_prefetch = 8;             // reads ahead in flight at most; they never hold more than this many slots
  io::HostAllocator* allocator = nullptr;  // nullptr: posix_memalign
  std::function<void(uint64_t bytes)> on_load;  // resident: the bytes of each batch of records read at creation
};

class HostTier final : public RecordTier {
 public:
  // The tier owns the reader; open the record files on it first. Errors: the pool's (memory), and in resident mode
  // the first failed read, naming the record.
  static Result<std::unique_ptr<HostTier>> create(std::unique_ptr<io::Reader> reader, Locator locate,
                                                  const HostTierOptions& options);

  Result<Pins> acquire(uint32_t layer, std::span<const int32_t> ids) override;
  void prefetch(uint32_t layer, std::span<const int32_t> ids) override;
  bool contains(uint32_t layer, int32_t id) const override { return pool_->contains(key(layer, id)); }
  uint32_t slots() const override { return pool_->slots(); }
  uint32_t max_acquire() const override;
  bool resident() const override { return options_.resident; }
  TierStats stats() override { return {pool_->stats(), 0.0}; }
  void reset_stats() override { pool_->reset_stats(); }

  uint64_t slot_bytes() const { return pool_->slot_bytes(); }
  uint64_t memory_bytes() const { return pool_->slot_stride() * pool_->slots(); }
  // Bytes read at creation (resident mode), outside stats().
  uint64_t bytes_read_at_creation() const { return initial_bytes_; }
  HostSlotPool& pool() { return *pool_; }

 private:
  explicit HostTier(const HostTierOptions& o) : options_(o) {}
  Key key(uint32_t layer, int32_t id) const { return uint64_t(layer) * options_.n_index + uint32_t(id); }
  Status load_all();

  HostTierOptions options_;
  std::unique_ptr<HostSlotPool> pool_;
  std::vector<Key> keys_;  // the current acquire's
  uint64_t initial_bytes_ = 0;
};

}  // namespace df::cache
