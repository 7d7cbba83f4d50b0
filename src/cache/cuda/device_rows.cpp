#include "diskformer/cache/cuda/device_rows.h"

#include <algorithm>
#include <string>

#include "diskformer/cudart/check.h"
#include "diskformer/cudart/pinned.h"
#include "diskformer/util/check.h"
#include "diskformer/util/size.h"

namespace df::cache {
namespace {

// Map entries copied in one piece once a batch touches more scattered runs than this (a prompt's first batch): the
// span between its first and last entry, a MiB at most for a 262,144-row table, costs less than many small copies.
constexpr size_t kMaxMapRuns = 16;
// Entries between two touched ones that are copied along rather than starting a new run.
constexpr uint32_t kMapGap = 64;

}  // namespace

DeviceRowCache::DeviceRowCache(RowCache& host, const DeviceRowsOptions& o, uint32_t slots, uint32_t warm)
    : host_(host), options_(o), rows_(host.options().rows), row_bytes_(host.options().row_bytes), slots_(slots),
      warm_(warm), lru_(slots - warm) {}

Result<std::unique_ptr<DeviceRowCache>> DeviceRowCache::create(RowCache& host, const DeviceRowsOptions& o) {
  if (o.max_batch == 0) return Error{"GPU row cache: max_batch must be positive"};
  const RowCacheOptions& h = host.options();
  const uint32_t slots = uint32_t(std::min<uint64_t>(o.slots, h.rows));
  uint64_t warm = 0;
  for (const RowRange& r : o.warm) {
    if (r.first > h.rows || r.count > h.rows - r.first)
      return Error{"GPU row cache: warm rows " + std::to_string(r.first) + ".." + std::to_string(r.first + r.count) +
                   " are outside the table of " + std::to_string(h.rows) + " rows"};
    warm += r.count;
  }
  const uint32_t batch = uint32_t(std::min<uint64_t>(o.max_batch, h.rows));
  if (slots < batch || slots - batch < warm)
    return Error{"GPU row cache: " + std::to_string(slots) + " slots cannot hold " + std::to_string(warm) +
                 " warm rows and a batch of " + std::to_string(batch) + " ids"};
  std::unique_ptr<DeviceRowCache> c(new DeviceRowCache(host, o, slots, uint32_t(warm)));
  const uint64_t rb = h.row_bytes;
  DF_ASSIGN(c->data_, cuda::DeviceBuffer::alloc(uint64_t(c->slots_) * rb, std::to_string(c->slots_) +
                                                                              " GPU row slots of " + format_size(rb)));
  DF_ASSIGN(c->map_, cuda::DeviceBuffer::alloc(h.rows * 4, "the GPU row map of " + std::to_string(h.rows) + " ids"));
  // Copy sources only (no direct reads land here): small pinned blocks need not start on a page.
  DF_ASSIGN(c->mirror_, io::AlignedBuffer::allocate(h.rows * 4, 64, cuda::pinned_host_allocator()));
  DF_ASSIGN(c->staging_, io::AlignedBuffer::allocate(uint64_t(batch) * rb, 64, cuda::pinned_host_allocator()));
  std::fill_n(c->mirror(), h.rows, -1);
  DF_CUDA_CHECK(cudaEventCreateWithFlags(&c->copied_, cudaEventDisableTiming));

  // The warm rows, a batch of them at a time through the staging buffer, into slots 0, 1, ...
  std::vector<uint32_t> ids, at;
  uint32_t slot = 0;
  for (const RowRange& r : o.warm)
    for (uint64_t id = r.first; id < r.first + r.count; ++id) {
      if (c->mirror()[id] >= 0) return Error{"GPU row cache: warm ranges overlap at row " + std::to_string(id)};
      ids.push_back(uint32_t(id));
      at.push_back(slot);
      c->mirror()[id] = int32_t(slot++);
    }
  for (size_t i = 0; i < ids.size(); i += batch) {
    const size_t n = std::min<size_t>(batch, ids.size() - i);
    if (Status st = host.gather(std::span(ids).subspan(i, n), c->staging_.data()); !st.ok())
      return Error{"GPU row cache: warm-up: " + st.error().message};
    c->copy_up(std::span(at).subspan(i, n), {});
    c->wait_copies();
  }
  DF_CHECK(slot == c->warm_);
  DF_CUDA_CHECK(cudaMemcpyAsync(c->map_.data(), c->mirror(), h.rows * 4, cudaMemcpyHostToDevice, o.consumer));
  DF_CUDA_CHECK(cudaStreamSynchronize(o.consumer));
  return c;
}

DeviceRowCache::~DeviceRowCache() {
  if (copied_) {
    cudaEventSynchronize(copied_);  // the copies read the pinned buffers freed next
    cudaEventDestroy(copied_);
  }
}

void DeviceRowCache::wait_copies() {
  if (!copies_pending_) return;
  DF_CUDA_CHECK(cudaEventSynchronize(copied_));
  copies_pending_ = false;
}

void DeviceRowCache::copy_up(std::span<const uint32_t> slots, std::span<const uint32_t> touched) {
  cudaStream_t s = options_.consumer;
  uint8_t* dst = data_.as<uint8_t>();
  const uint8_t* src = staging_.data();
  // Rows: one copy per run of consecutive slots (a cold cache hands its free slots out in order).
  for (size_t i = 0; i < slots.size();) {
    size_t j = i + 1;
    while (j < slots.size() && slots[j] == slots[j - 1] + 1) ++j;
    DF_CUDA_CHECK(cudaMemcpyAsync(dst + uint64_t(slots[i]) * row_bytes_, src + i * row_bytes_, (j - i) * row_bytes_,
                                  cudaMemcpyHostToDevice, s));
    i = j;
  }
  bytes_copied_ += slots.size() * row_bytes_;
  // Map entries: runs of touched ids with short gaps copied along, or one span where the runs are many.
  std::vector<std::pair<uint32_t, uint32_t>> runs;  // [first, last]
  for (uint32_t id : touched) {
    if (!runs.empty() && id - runs.back().second <= kMapGap) runs.back().second = id;
    else runs.emplace_back(id, id);
  }
  if (runs.size() > kMaxMapRuns) runs = {{runs.front().first, runs.back().second}};
  for (const auto& [first, last] : runs)
    DF_CUDA_CHECK(cudaMemcpyAsync(map_.as<int32_t>() + first, mirror() + first, (uint64_t(last) - first + 1) * 4,
                                  cudaMemcpyHostToDevice, s));
  DF_CUDA_CHECK(cudaEventRecord(copied_, s));
  copies_pending_ = true;
}

Status DeviceRowCache::prepare(std::span<const int32_t> ids) {
  if (ids.size() > options_.max_batch)
    return Error{"GPU row cache: a batch of " + std::to_string(ids.size()) + " ids, more than the " +
                 std::to_string(options_.max_batch) + " it holds"};
  bool any_miss = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || uint64_t(ids[i]) >= rows_)
      return Error{"GPU row cache: id " + std::to_string(ids[i]) + " at batch position " + std::to_string(i) +
                   " is outside the table of " + std::to_string(rows_) + " rows"};
    any_miss = any_miss || mirror()[ids[i]] < 0;
  }
  // Copies still reading the mirror or the staging buffer finish before either changes.
  if (any_miss) wait_copies();

  std::vector<SlotId> pinned;      // LRU table slots held until the batch is done (hits and misses)
  std::vector<uint32_t> miss_ids, miss_slots;  // cache slots
  std::vector<uint32_t> touched;   // map entries changed: misses and the rows they evicted
  for (const int32_t id : ids) {
    const int32_t m = mirror()[id];
    if (m >= 0 && uint32_t(m) < warm_) {
      ++warm_hits_;
      continue;
    }
    // The table counts hits and misses; a hit becomes the most recently used when unpinned.
    const SlotTable::Acquired a = lru_.acquire(Key(id));
    DF_CHECK(a.outcome != SlotTable::Outcome::kFull && a.outcome != SlotTable::Outcome::kLateHit);
    pinned.push_back(a.slot);
    if (a.outcome != SlotTable::Outcome::kMiss) continue;
    if (a.evicted) {
      mirror()[a.evicted_key] = -1;
      touched.push_back(uint32_t(a.evicted_key));
    }
    const uint32_t slot = warm_ + a.slot;
    mirror()[id] = int32_t(slot);
    touched.push_back(uint32_t(id));
    miss_ids.push_back(uint32_t(id));
    miss_slots.push_back(slot);
  }
  Status st;
  if (!miss_ids.empty()) {
    st = host_.gather(miss_ids, staging_.data());
    for (size_t i = 0; i < miss_ids.size(); ++i) {
      lru_.loaded(miss_slots[i] - warm_, st.ok(), st.ok() ? row_bytes_ : 0);
      if (!st.ok()) mirror()[miss_ids[i]] = -1;  // forgotten: the next batch asks the RAM cache again
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    if (st.ok()) {
      copy_up(miss_slots, touched);
    } else {
      copy_up({}, touched);  // the rows evicted for the failed misses are gone: the device map says so too
    }
  }
  for (SlotId t : pinned) lru_.unpin(t);
  if (!st.ok()) return Error{"GPU row cache: " + st.error().message};
  return {};
}

TierStats DeviceRowCache::stats() const {
  TierStats t;
  t.cache = lru_.stats();
  t.cache.hits += warm_hits_;
  t.cache.bytes_loaded = bytes_copied_;
  return t;
}

void DeviceRowCache::reset_stats() {
  lru_.stats() = CacheStats{};
  warm_hits_ = 0;
  bytes_copied_ = 0;
}

}  // namespace df::cache
