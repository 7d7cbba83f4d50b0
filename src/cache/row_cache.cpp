#include "diskformer/cache/row_cache.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <unordered_map>

#include "diskformer/util/check.h"

namespace df::cache {
namespace {

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

std::string range_text(const RowRange& r) {
  return "rows " + std::to_string(r.first) + ".." + std::to_string(r.first + r.count);
}

}  // namespace

Result<std::unique_ptr<RowCache>> RowCache::create(std::unique_ptr<io::Reader> reader, const RowCacheOptions& options) {
  if (!reader) return Error{"row cache: no reader"};
  if (options.row_bytes == 0 || options.rows == 0 || options.slots == 0)
    return Error{"row cache: rows " + std::to_string(options.rows) + ", row bytes " + std::to_string(options.row_bytes) +
                 ", slots " + std::to_string(options.slots) + ": all must be positive"};
  if (options.rows > uint64_t(INT32_MAX) || options.slots > uint32_t(INT32_MAX))
    return Error{"row cache: " + std::to_string(options.rows) + " rows: more than the id map can index"};
  const io::FileInfo& f = reader->file(options.file);
  uint64_t table_end = options.table_offset + options.rows * options.row_bytes;
  if (table_end > f.size)
    return Error{"row cache: table of " + std::to_string(options.rows) + " rows of " +
                 std::to_string(options.row_bytes) + " bytes at offset " + std::to_string(options.table_offset) +
                 " runs past the end of " + f.path + " (size " + std::to_string(f.size) + ")"};
  std::unique_ptr<RowCache> cache(new RowCache(std::move(reader), options));
  uint32_t slots = uint32_t(std::min<uint64_t>(options.slots, options.rows));
  cache->options_.slots = slots;
  io::HostAllocator& allocator = options.allocator ? *options.allocator : io::default_host_allocator();
  auto memory = io::AlignedBuffer::allocate(uint64_t(slots) * options.row_bytes, io::kDirectAlignment, allocator);
  if (!memory.ok()) return Error{"row cache: " + std::to_string(slots) + " slots: " + memory.error().message};
  cache->memory_ = std::move(memory).value();
  cache->map_.assign(options.rows, -1);
  return cache;
}

RowCache::RowCache(std::unique_ptr<io::Reader> reader, const RowCacheOptions& options)
    : reader_(std::move(reader)), options_(options) {}

RowCache::~RowCache() = default;  // every read finishes inside warm() and gather()

Status RowCache::warm(std::span<const RowRange> ranges) {
  if (warm_ > 0 || gathered_) return Error{"row cache: warm() must come once, before the first gather()"};
  std::vector<RowRange> sorted(ranges.begin(), ranges.end());
  std::sort(sorted.begin(), sorted.end(), [](const RowRange& a, const RowRange& b) { return a.first < b.first; });
  uint64_t total = 0;
  for (size_t i = 0; i < sorted.size(); i++) {
    const RowRange& r = sorted[i];
    if (r.first > options_.rows || r.count > options_.rows - r.first)
      return Error{"row cache: warm range " + range_text(r) + " is outside the table of " +
                   std::to_string(options_.rows) + " rows"};
    if (i > 0 && sorted[i - 1].first + sorted[i - 1].count > r.first)
      return Error{"row cache: warm ranges " + range_text(sorted[i - 1]) + " and " + range_text(r) + " overlap"};
    total += r.count;
  }
  if (total >= options_.slots)
    return Error{"row cache: warm ranges hold " + std::to_string(total) + " rows, but the cache has " +
                 std::to_string(options_.slots) + " slots and needs at least one for other rows"};
  std::vector<io::ReadRequest> requests;
  uint32_t slot = 0;
  for (const RowRange& r : sorted) {
    if (r.count == 0) continue;
    requests.push_back({.file = options_.file, .offset = row_offset(r.first), .length = r.count * options_.row_bytes,
                        .dst = slot_ptr(slot)});
    slot += uint32_t(r.count);
  }
  uint64_t t = now_ns();
  Status st = reader_->read_batch(requests);
  stats_.wait_ns += now_ns() - t;
  if (!st.ok()) return Error{"row cache: warm-up: " + st.error().message};
  slot = 0;
  for (const RowRange& r : sorted)
    for (uint64_t id = r.first; id < r.first + r.count; id++) map_[id] = int32_t(slot++);
  warm_ = slot;
  stats_.bytes_loaded += uint64_t(slot) * options_.row_bytes;
  return Status::Ok();
}

Status RowCache::gather(std::span<const uint32_t> ids, void* dst_) {
  for (size_t i = 0; i < ids.size(); i++)
    if (ids[i] >= options_.rows)
      return Error{"row cache: id " + std::to_string(ids[i]) + " at batch position " + std::to_string(i) +
                   " is out of range (the table has " + std::to_string(options_.rows) + " rows)"};
  gathered_ = true;
  if (!lru_) lru_ = std::make_unique<SlotTable>(options_.slots - warm_);
  auto* dst = static_cast<uint8_t*>(dst_);
  const uint64_t rb = options_.row_bytes;

  struct Miss {
    uint32_t id;
    SlotId slot;       // LRU table slot, or kNoSlot when read straight into dst
    size_t first_pos;  // batch position it was first seen at
  };
  std::vector<Miss> misses;
  std::unordered_map<uint32_t, size_t> miss_of;  // id -> index in misses
  std::vector<std::pair<size_t, size_t>> later;  // (batch position, miss index) filled after the reads
  std::vector<SlotId> pinned;                    // LRU slots held until the batch is done

  for (size_t pos = 0; pos < ids.size(); pos++) {
    uint32_t id = ids[pos];
    uint8_t* out = dst + pos * rb;
    int32_t m = map_[id];
    if (m >= 0) {
      if (uint32_t(m) < warm_) {
        stats_.warm_hits++;
      } else {
        // Pinned for the rest of the batch, so that the batch's own misses do not evict it.
        SlotId t = SlotId(uint32_t(m) - warm_);
        lru_->pin(t);
        pinned.push_back(t);
        stats_.hits++;
      }
      std::memcpy(out, slot_ptr(uint32_t(m)), rb);
      continue;
    }
    if (auto it = miss_of.find(id); it != miss_of.end()) {
      later.emplace_back(pos, it->second);
      continue;
    }
    SlotTable::Acquired a = lru_->acquire(id);
    DF_CHECK(a.outcome == SlotTable::Outcome::kMiss || a.outcome == SlotTable::Outcome::kFull);
    if (a.evicted) {
      map_[a.evicted_key] = -1;
      stats_.evictions++;
    }
    if (a.outcome == SlotTable::Outcome::kFull) {
      stats_.bypassed++;
    } else {
      pinned.push_back(a.slot);
      later.emplace_back(pos, misses.size());
    }
    miss_of.emplace(id, misses.size());
    misses.push_back({id, a.slot, pos});
    stats_.misses++;
  }

  std::vector<io::ReadRequest> requests;
  requests.reserve(misses.size());
  for (const Miss& m : misses) {
    uint8_t* target = m.slot == kNoSlot ? dst + m.first_pos * rb : slot_ptr(warm_ + m.slot);
    requests.push_back({.file = options_.file, .offset = row_offset(m.id), .length = rb, .dst = target});
  }
  uint64_t t = now_ns();
  Status st = requests.empty() ? Status::Ok() : reader_->read_batch(requests);
  stats_.wait_ns += now_ns() - t;
  for (const Miss& m : misses) {
    if (m.slot == kNoSlot) continue;
    lru_->loaded(m.slot, st.ok(), rb);
    if (st.ok()) map_[m.id] = int32_t(warm_ + m.slot);
  }
  if (st.ok()) {
    stats_.bytes_loaded += misses.size() * rb;
    for (auto [pos, mi] : later) {
      const Miss& m = misses[mi];
      const uint8_t* src = m.slot == kNoSlot ? dst + m.first_pos * rb : slot_ptr(warm_ + m.slot);
      std::memcpy(dst + pos * rb, src, rb);
    }
  }
  for (SlotId s : pinned) lru_->unpin(s);
  if (!st.ok()) return Error{"row cache: " + st.error().message};
  return Status::Ok();
}

}  // namespace df::cache
