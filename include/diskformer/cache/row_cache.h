// A cache of rows of one fixed-size-row table on disk (token embeddings, per-layer embedding tables): row id i lives
// at table_offset + i * row_bytes. Slots are packed back to back in host memory (slot s at s * row_bytes):
//
//   [ warm rows: loaded up front, never evicted | LRU rows: filled on demand, evicted least recently used first ]
//
// slot_of(id) is a flat id -> slot map (-1 where absent), O(1) and cheap to mirror on a GPU. gather() copies the
// rows of a batch of ids into a caller buffer, reading the missing ones together. As a RecordTier (layer 0: the
// table, index: the row id), acquire() pins rows where they are and prefetch() reads rows ahead without waiting.
//
// Not thread-safe: one owner thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "diskformer/cache/slot_table.h"
#include "diskformer/cache/tier.h"
#include "diskformer/io/buffer.h"
#include "diskformer/io/reader.h"
#include "diskformer/util/result.h"

namespace df::cache {

struct RowCacheOptions {
  io::FileId file = 0;        // opened on the reader given to create()
  uint64_t table_offset = 0;  // byte offset of row 0
  uint64_t row_bytes = 0;
  uint64_t rows = 0;          // ids are 0 .. rows-1
  uint32_t slots = 0;         // rows held in memory, warm and LRU together
  io::HostAllocator* allocator = nullptr;  // nullptr: posix_memalign
  uint32_t max_prefetch = 8;  // rows read ahead and in flight at most
};

struct RowRange {
  uint64_t first = 0;
  uint64_t count = 0;
};

struct RowCacheStats {
  uint64_t warm_hits = 0;     // ids found in the warm rows
  uint64_t hits = 0;          // ids found in the LRU rows
  uint64_t misses = 0;        // ids read from disk (once per distinct id in a batch)
  uint64_t evictions = 0;
  uint64_t bypassed = 0;      // misses read straight into the caller's buffer because the batch pinned every slot
  uint64_t bytes_loaded = 0;  // warm-up included
  uint64_t wait_ns = 0;
};

class RowCache final : public RecordTier {
 public:
  // The cache owns the reader; options.file must be open on it and hold the whole table.
  static Result<std::unique_ptr<RowCache>> create(std::unique_ptr<io::Reader> reader, const RowCacheOptions& options);
  ~RowCache() override;
  RowCache(const RowCache&) = delete;
  RowCache& operator=(const RowCache&) = delete;

  // Loads the ranges into the warm slots (one read per range). Once, before the first gather; the ranges must not
  // overlap, and together they must leave at least one slot for the LRU part. Errors name the range.
  Status warm(std::span<const RowRange> ranges);

  // dst receives ids.size() rows of row_bytes, in order. An id >= rows fails naming it, before anything is read.
  Status gather(std::span<const uint32_t> ids, void* dst);

  // RecordTier over layer 0 (the table): rows pinned where they are, misses read together; warm rows need no pin.
  Result<Pins> acquire(uint32_t layer, std::span<const int32_t> ids) override;
  void prefetch(uint32_t layer, std::span<const int32_t> ids) override;
  bool contains(uint32_t layer, int32_t id) const override {
    return layer == 0 && id >= 0 && uint64_t(id) < map_.size() && map_[size_t(id)] >= 0;
  }
  uint32_t slots() const override { return options_.slots; }
  uint32_t max_acquire() const override { return options_.slots - warm_; }
  bool resident() const override { return warm_ == options_.rows; }
  TierStats stats() override;
  void reset_stats() override { stats_ = {}; if (lru_) lru_->stats() = CacheStats{}; }

  const RowCacheOptions& options() const { return options_; }  // slots: as created (at most rows)
  int64_t slot_of(uint64_t id) const { return id < map_.size() ? map_[id] : -1; }
  const int32_t* slot_map() const { return map_.data(); }  // rows entries
  const uint8_t* slot_data(uint32_t slot) const { return memory_.data() + uint64_t(slot) * options_.row_bytes; }
  uint32_t warm_slots() const { return warm_; }
  uint32_t lru_slots() const { return options_.slots - warm_; }
  const RowCacheStats& row_stats() const { return stats_; }  // warm hits and bypasses apart
  io::Reader& reader() { return *reader_; }

 private:
  RowCache(std::unique_ptr<io::Reader> reader, const RowCacheOptions& options);
  uint8_t* slot_ptr(uint32_t slot) { return memory_.data() + uint64_t(slot) * options_.row_bytes; }
  SlotTable& lru();  // made at first use, over the slots warm() left
  // Collects finished reads ahead (wait: all of them).
  void collect(bool wait);
  uint64_t row_offset(uint64_t id) const { return options_.table_offset + id * options_.row_bytes; }

  std::unique_ptr<io::Reader> reader_;
  RowCacheOptions options_;
  io::AlignedBuffer memory_;
  std::vector<int32_t> map_;    // id -> slot, -1 absent
  uint32_t warm_ = 0;           // slots [0, warm_) are warm
  std::unique_ptr<SlotTable> lru_;  // over slots [warm_, slots): table slot t is cache slot warm_ + t
  bool gathered_ = false;
  RowCacheStats stats_;
  std::unordered_map<SlotId, uint32_t> ahead_;  // LRU slot -> row id of a read ahead in flight
  std::vector<io::Completion> done_;
};

}  // namespace df::cache
