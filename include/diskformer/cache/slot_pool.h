// A pool of N equal slots in aligned host memory holding records read from disk: the SlotTable's bookkeeping plus
// the memory and the reads. get()/get_many() return pinned handles (blocking until the bytes are there);
// prefetch() starts reads and never blocks; poll() collects finished reads.
//
// Where a record's bytes are is the caller's knowledge (a store maps a key to byte ranges): a Locator lists the
// extents of a key, each copied to its own offset inside the slot. Slots are 4 KiB-aligned and their stride a
// multiple of 4 KiB, so an extent whose file offset and slot offset agree modulo 4 KiB is read straight into the
// slot with O_DIRECT; others go through the reader's bounce buffers.
//
// Not thread-safe: one owner thread; the reads run underneath (io_uring or the pread pool).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "diskformer/cache/slot_table.h"
#include "diskformer/io/buffer.h"
#include "diskformer/io/reader.h"
#include "diskformer/util/result.h"

namespace df::cache {

// length bytes of file at offset, to be placed at slot_offset inside the slot.
struct Extent {
  io::FileId file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t slot_offset = 0;
};

// Appends the extents of key to out; an error (unknown key) fails the get that asked for it.
using Locator = std::function<Status(Key key, std::vector<Extent>& out)>;

struct SlotPoolOptions {
  uint32_t slots = 0;            // N
  uint64_t slot_bytes = 0;       // every record fits in one slot
  uint32_t max_prefetch = 8;     // prefetch reads in flight at most (K)
  io::HostAllocator* allocator = nullptr;  // nullptr: posix_memalign; a CUDA build passes a pinned allocator
  bool register_memory = true;   // offer the slot memory to the reader as registered buffers (io_uring)
};

class HostSlotPool {
 public:
  // The pool owns the reader (and so all of its completions); open the record files through reader() first.
  static Result<std::unique_ptr<HostSlotPool>> create(std::unique_ptr<io::Reader> reader, Locator locate,
                                                       const SlotPoolOptions& options);
  ~HostSlotPool();
  HostSlotPool(const HostSlotPool&) = delete;
  HostSlotPool& operator=(const HostSlotPool&) = delete;

  io::Reader& reader() { return *reader_; }

  // The record of key, pinned while the handle lives. Errors: the locator's, a failed read (naming file, offset and
  // length), or every slot pinned ("all 8 slots are pinned ...").
  Result<SlotHandle> get(Key key);
  // Handles in the order of keys (a key may repeat). The misses are read together, so they overlap on the device.
  // On an error no handle is kept.
  Result<std::vector<SlotHandle>> get_many(std::span<const Key> keys);

  // Starts reads for keys that are neither present nor loading, while fewer than max_prefetch prefetch reads are in
  // flight and a slot is evictable; the rest are dropped (counted). Never blocks.
  void prefetch(std::span<const Key> keys);
  // Collects finished reads without blocking (prefetches become hits).
  void poll();
  // Waits for every prefetch in flight.
  void wait_prefetches();

  bool contains(Key key) const;  // present and ready
  const SlotTable& table() const { return table_; }
  const CacheStats& stats() const { return table_.stats(); }
  void reset_stats() { table_.stats() = CacheStats{}; }
  uint32_t slots() const { return table_.size(); }
  uint64_t slot_bytes() const { return options_.slot_bytes; }
  uint64_t slot_stride() const { return stride_; }
  uint32_t prefetch_in_flight() const { return prefetch_in_flight_; }
  bool memory_registered() const { return registered_; }

 private:
  HostSlotPool(std::unique_ptr<io::Reader> reader, Locator locate, const SlotPoolOptions& options);
  uint8_t* slot_data(SlotId s) { return memory_.data() + uint64_t(s) * stride_; }
  // Locates key and submits its reads into slot s; an error leaves nothing in flight for s.
  Status start_load(SlotId s, Key key, bool prefetch);
  void on_completion(io::Completion& c);
  // Blocks for one completion.
  void wait_one();
  SlotHandle handle(SlotId s) { return SlotHandle(&table_, s, slot_data(s), options_.slot_bytes); }

  struct Load {  // the reads of one slot in flight
    uint32_t reads_left = 0;
    uint64_t bytes = 0;
    bool prefetch = false;
    Status status;
  };

  std::unique_ptr<io::Reader> reader_;
  Locator locate_;
  SlotPoolOptions options_;
  uint64_t stride_ = 0;
  io::AlignedBuffer memory_;
  SlotTable table_;
  std::vector<Load> loads_;  // per slot
  std::vector<Extent> extents_;
  std::vector<io::ReadRequest> requests_;
  std::vector<io::Completion> completions_;
  uint32_t prefetch_in_flight_ = 0;
  bool registered_ = false;
};

}  // namespace df::cache
