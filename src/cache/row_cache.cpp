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

RowCache::~RowCache() { collect(/*wait=*/true); }  // reads ahead write into the slots' memory

Status RowCache::warm(std::span<const RowRange> ranges) {
  if (warm_ > 0 || gathered_) return Error{"row cache: warm() must come once, before the first use"};
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
  collect(/*wait=*/true);  // reads ahead land first: their slots are then plain hits
  SlotTable& table = lru();
  (void)table;
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

SlotTable& RowCache::lru() {
  gathered_ = true;
  if (!lru_) lru_ = std::make_unique<SlotTable>(options_.slots - warm_);
  return *lru_;
}

void RowCache::collect(bool wait) {
  while (!ahead_.empty()) {
    done_.clear();
    reader_->poll(done_, wait ? 1 : 0);
    if (done_.empty()) return;
    for (const io::Completion& c : done_) {
      const SlotId t = SlotId(c.user_data);
      const uint32_t id = ahead_.at(t);
      ahead_.erase(t);
      lru_->loaded(t, c.status.ok(), options_.row_bytes);
      if (c.status.ok()) {
        map_[id] = int32_t(warm_ + t);
        stats_.bytes_loaded += options_.row_bytes;
      }
    }
  }
}

Result<Pins> RowCache::acquire(uint32_t layer, std::span<const int32_t> ids) {
  DF_CHECK(layer == 0);
  for (size_t i = 0; i < ids.size(); i++)
    if (ids[i] < 0 || uint64_t(ids[i]) >= options_.rows)
      return Error{"row cache: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                   " is out of range (the table has " + std::to_string(options_.rows) + " rows)"};
  collect(/*wait=*/false);
  SlotTable& t = lru();
  const uint64_t rb = options_.row_bytes;
  std::vector<Pins::Entry> entries;
  entries.reserve(ids.size());
  std::vector<io::ReadRequest> reads;
  std::vector<std::pair<SlotId, uint32_t>> missed;  // LRU slot, row id
  for (int32_t id32 : ids) {
    const uint32_t id = uint32_t(id32);
    const int32_t m = map_[id];
    if (m >= 0 && uint32_t(m) < warm_) {  // warm rows never move: a view needs no pin
      stats_.warm_hits++;
      entries.push_back({SlotHandle(nullptr, SlotId(m), slot_ptr(uint32_t(m)), rb), SlotId(m)});
      continue;
    }
    if (ahead_.size()) {  // its read ahead still in flight: wait for it
      for (auto& [slot, row] : ahead_)
        if (row == id) {
          collect(/*wait=*/true);
          break;
        }
    }
    const SlotTable::Acquired a = t.acquire(id);
    if (a.outcome == SlotTable::Outcome::kFull)
      return Error{"row cache: every one of the " + std::to_string(t.size()) + " LRU slots is pinned"};
    if (a.evicted) {
      map_[a.evicted_key] = -1;
      stats_.evictions++;
    }
    entries.push_back({SlotHandle(&t, a.slot, slot_ptr(warm_ + a.slot), rb), SlotId(warm_ + a.slot)});
    if (a.outcome == SlotTable::Outcome::kMiss) {
      reads.push_back({.file = options_.file, .offset = row_offset(id), .length = rb, .dst = slot_ptr(warm_ + a.slot)});
      missed.push_back({a.slot, id});
      stats_.misses++;
    } else {
      stats_.hits++;
    }
  }
  if (!reads.empty()) {
    const uint64_t t0 = now_ns();
    Status st = reader_->read_batch(reads);
    stats_.wait_ns += now_ns() - t0;
    for (const auto& [slot, id] : missed) {
      t.loaded(slot, st.ok(), rb);
      if (st.ok()) map_[id] = int32_t(warm_ + slot);
    }
    if (!st.ok()) return Error{"row cache: " + st.error().message};
    stats_.bytes_loaded += reads.size() * rb;
  }
  return Pins(this, std::move(entries));
}

void RowCache::prefetch(uint32_t layer, std::span<const int32_t> ids) {
  if (layer != 0) return;
  collect(/*wait=*/false);
  SlotTable& t = lru();
  std::vector<io::ReadRequest> reads;
  for (int32_t id32 : ids) {
    if (id32 < 0 || uint64_t(id32) >= options_.rows || map_[size_t(id32)] >= 0) continue;
    if (ahead_.size() + reads.size() >= options_.max_prefetch) {
      t.stats().prefetch_dropped++;
      continue;
    }
    const uint32_t id = uint32_t(id32);
    const SlotTable::Acquired a = t.claim_for_prefetch(id);
    if (a.slot == kNoSlot) continue;
    if (a.evicted) {
      map_[a.evicted_key] = -1;
      stats_.evictions++;
    }
    ahead_[a.slot] = id;
    reads.push_back({.file = options_.file, .offset = row_offset(id), .length = options_.row_bytes,
                     .dst = slot_ptr(warm_ + a.slot), .user_data = a.slot});
  }
  if (!reads.empty()) reader_->submit(reads);
}

TierStats RowCache::stats() {
  CacheStats c = lru_ ? lru_->stats() : CacheStats{};
  // The LRU table counts its own lookups; the warm rows are hits it never saw.
  c.hits += stats_.warm_hits;
  c.bytes_loaded = stats_.bytes_loaded;
  c.wait_ns = stats_.wait_ns;
  return {c, 0.0};
}

}  // namespace df::cache
