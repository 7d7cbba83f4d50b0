// The GPU's rows of a per-token table (gemma4's per-layer embeddings) over a row cache in RAM (row_cache.h): slots of
// row_bytes in device memory, and a device id -> slot map ([rows] int32, -1 absent) that the gather kernel reads, so
// that a step whose rows are all present copies nothing and waits for nothing. Slots as in the RAM cache:
//
//   [ warm rows: copied at create, never evicted | LRU rows: copied before the step that needs them ]
//
// prepare(ids) makes one batch's rows present: the misses come from the RAM cache (its hits, or its reads from disk)
// through a pinned staging buffer and are copied on the consumer stream, with the map entries that changed, so the
// kernels queued after it on that stream see them. The host keeps the map's mirror; the next prepare that changes it
// first waits for the copies that read it.
//
// No kernels, no models: a row is bytes. Not thread-safe: one owner thread.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "diskformer/cache/row_cache.h"
#include "diskformer/cache/slot_table.h"
#include "diskformer/cache/tier.h"
#include "diskformer/cudart/buffer.h"
#include "diskformer/io/buffer.h"
#include "diskformer/util/result.h"

namespace df::cache {

struct DeviceRowsOptions {
  uint32_t slots = 0;                // rows on the GPU, warm and LRU together (at most the table's rows)
  uint32_t max_batch = 512;          // ids one prepare() takes at most: the LRU part holds at least this many rows
  std::vector<RowRange> warm;        // copied at create into the warm slots; they must leave max_batch slots
  cudaStream_t consumer = nullptr;   // the stream whose kernels read the slots and the map
};

class DeviceRowCache {
 public:
  // `host` must outlive the cache. Errors: slots fewer than max_batch (+ the warm rows), not enough device memory
  // (with the sizes), a failed read of the warm rows.
  static Result<std::unique_ptr<DeviceRowCache>> create(RowCache& host, const DeviceRowsOptions& options);
  ~DeviceRowCache();
  DeviceRowCache(const DeviceRowCache&) = delete;
  DeviceRowCache& operator=(const DeviceRowCache&) = delete;

  // Makes the rows of ids present for the work queued next on the consumer stream. Errors: more than max_batch
  // ids, an id outside the table (naming it and its position, before anything changes), a failed read from the RAM
  // cache (the batch's misses are forgotten; the rows present stay).
  Status prepare(std::span<const int32_t> ids);

  const uint8_t* slot_data() const { return data_.as<uint8_t>(); }  // [slots][row_bytes] (device)
  const int32_t* slot_map() const { return map_.as<int32_t>(); }    // [rows] (device), -1 absent
  int32_t slot_of(uint64_t id) const { return id < rows_ ? mirror()[id] : -1; }  // the host's mirror
  uint32_t slots() const { return slots_; }
  uint32_t warm_slots() const { return warm_; }
  uint64_t rows() const { return rows_; }
  uint64_t row_bytes() const { return row_bytes_; }
  uint64_t device_bytes() const { return data_.size() + map_.size(); }
  // Lookups (warm rows are hits), misses, and the bytes copied to the GPU since create (warm rows included) or
  // the last reset.
  TierStats stats() const;
  void reset_stats();

 private:
  DeviceRowCache(RowCache& host, const DeviceRowsOptions& o, uint32_t slots, uint32_t warm);
  int32_t* mirror() { return reinterpret_cast<int32_t*>(mirror_.data()); }
  const int32_t* mirror() const { return reinterpret_cast<const int32_t*>(mirror_.data()); }
  // Copies rows staged at staging_[i] to slots[i] and the map entries of `touched` (sorted, distinct), then records
  // copied_.
  void copy_up(std::span<const uint32_t> slots, std::span<const uint32_t> touched);
  void wait_copies();

  RowCache& host_;
  DeviceRowsOptions options_;
  uint64_t rows_ = 0, row_bytes_ = 0;
  uint32_t slots_ = 0, warm_ = 0;
  cuda::DeviceBuffer data_, map_;
  io::AlignedBuffer mirror_;   // pinned [rows] int32: the map as the host last wrote it
  io::AlignedBuffer staging_;  // pinned [max(max_batch, warm)][row_bytes]
  SlotTable lru_;              // over slots [warm_, slots_): table slot t is cache slot warm_ + t
  cudaEvent_t copied_ = nullptr;  // after the last copies that read mirror_ and staging_
  bool copies_pending_ = false;
  uint64_t warm_hits_ = 0, bytes_copied_ = 0;
};

}  // namespace df::cache
