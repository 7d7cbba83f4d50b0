// The bookkeeping of a pool of N equal slots, apart from the memory it describes: which record (a 64-bit key) each
// slot holds, its state, its pins, the LRU order of the evictable slots, and the counters. A host pool
// (cache/slot_pool.h) and a GPU pool put memory and loading around the same table.
//
// Every operation is O(1) (a hash map from key to slot, an intrusive doubly linked LRU list over slot indices).
// A slot is evictable only when it is Ready and unpinned; Loading slots (a read is writing into them) and pinned
// slots are never on the LRU list, so they are never handed out again.
//
// Not thread-safe: one owner thread (the pools around it do their I/O asynchronously underneath).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace df::cache {

using Key = uint64_t;
using SlotId = uint32_t;
constexpr SlotId kNoSlot = UINT32_MAX;

enum class SlotState : uint8_t {
  kFree,     // holds nothing
  kLoading,  // bound to a key, a read is filling it
  kReady,    // holds its key's bytes
  kFailed,   // its read failed; unbound from its key, freed when the last pin goes
};

struct CacheStats {
  uint64_t hits = 0;                // asked for, already there
  uint64_t late_hits = 0;           // asked for while its prefetch was still reading (the caller waited for it)
  uint64_t misses = 0;              // asked for, not there: read on demand
  uint64_t evictions = 0;           // ready slots handed to another key
  uint64_t bytes_loaded = 0;        // bytes read into slots (demand and prefetch)
  uint64_t load_errors = 0;         // reads that failed
  uint64_t prefetch_issued = 0;     // prefetches that started a read
  uint64_t prefetch_used = 0;       // of those, asked for before eviction (hit or late hit)
  uint64_t prefetch_dropped = 0;    // prefetches not started: too many in flight or no evictable slot
  uint64_t prefetch_evicted_unused = 0;
  uint64_t wait_ns = 0;             // time callers spent blocked on reads

  uint64_t lookups() const { return hits + late_hits + misses; }
  // Two tables' counters as one (an admission's parts, a model's row caches).
  CacheStats& operator+=(const CacheStats& t) {
    hits += t.hits, late_hits += t.late_hits, misses += t.misses, evictions += t.evictions;
    bytes_loaded += t.bytes_loaded, load_errors += t.load_errors;
    prefetch_issued += t.prefetch_issued, prefetch_used += t.prefetch_used;
    prefetch_dropped += t.prefetch_dropped, prefetch_evicted_unused += t.prefetch_evicted_unused;
    wait_ns += t.wait_ns;
    return *this;
  }
  double hit_rate() const { return lookups() ? double(hits + late_hits) / double(lookups()) : 0.0; }
};

class SlotTable {
 public:
  explicit SlotTable(uint32_t n_slots);

  enum class Outcome {
    kHit,      // ready: pinned for the caller
    kLateHit,  // a prefetch is reading it: pinned; wait for the slot to become ready
    kPending,  // a demand read (an earlier caller in the same batch) is reading it: pinned; wait (counted a hit)
    kMiss,     // claimed for the key in state kLoading and pinned: the caller must load it, then loaded()
    kFull,     // not there and no slot can be claimed: every slot is pinned or loading
  };
  struct Acquired {
    Outcome outcome = Outcome::kFull;
    SlotId slot = kNoSlot;
    bool evicted = false;  // kMiss took a ready slot from evicted_key
    Key evicted_key = 0;
  };
  // Looks the key up for use, counting a hit, late hit or miss; pins the slot unless kFull.
  Acquired acquire(Key key);

  // Claims an unpinned slot for a prefetch of key, in state kLoading (not pinned, not evictable until loaded).
  // kNoSlot when the key is already present or loading (not counted) or nothing is evictable (counted as dropped).
  Acquired claim_for_prefetch(Key key);

  // The read into a kLoading slot finished. On failure the key is forgotten so that the next acquire misses and
  // reads again; the slot goes back to the free list once unpinned.
  void loaded(SlotId slot, bool ok, uint64_t bytes);

  void pin(SlotId slot);
  void unpin(SlotId slot);  // the last pin of a ready slot makes it the most recently used

  // Forgets every unpinned ready slot (e.g. the file changed). Pinned and loading slots stay.
  void clear_unpinned();

  SlotId find(Key key) const;
  // What a miss would take now: false with a free slot (nothing evicted), else true with the least recently used
  // evictable key in *victim; false with *victim untouched when nothing is evictable either.
  bool next_victim(Key* victim) const;
  bool has_free_slot() const { return !free_.empty(); }
  SlotState state(SlotId s) const { return slots_[s].state; }
  Key key(SlotId s) const { return slots_[s].key; }
  uint32_t pins(SlotId s) const { return slots_[s].pins; }
  bool prefetched(SlotId s) const { return slots_[s].prefetched; }
  uint32_t size() const { return uint32_t(slots_.size()); }
  uint32_t pinned_slots() const { return pinned_; }
  uint32_t loading_slots() const { return loading_; }
  // Loading slots nobody holds a pin on (prefetches in flight): they become evictable once loaded.
  uint32_t unpinned_loading() const { return unpinned_loading_; }
  uint32_t ready_slots() const;
  std::vector<Key> lru_order() const;  // evictable keys, least recently used first

  CacheStats& stats() { return stats_; }
  const CacheStats& stats() const { return stats_; }

 private:
  struct Slot {
    Key key = 0;
    SlotState state = SlotState::kFree;
    bool prefetched = false;  // loaded by a prefetch and not asked for yet
    uint32_t pins = 0;
    SlotId prev = kNoSlot, next = kNoSlot;  // LRU links while evictable
  };
  Acquired take_slot(Key key);  // a free slot, else the LRU victim; bound to key in state kLoading
  void lru_push_back(SlotId s);  // most recently used end
  void lru_remove(SlotId s);
  void make_free(SlotId s);

  std::vector<Slot> slots_;
  std::unordered_map<Key, SlotId> index_;
  std::vector<SlotId> free_;
  SlotId lru_head_ = kNoSlot, lru_tail_ = kNoSlot;  // head = least recently used
  uint32_t pinned_ = 0, loading_ = 0, unpinned_loading_ = 0;
  CacheStats stats_;
};

// A pin on one slot, released when the handle dies (DuckDB's BufferHandle). Move-only. data is host memory for
// the host pool and device memory for a GPU pool; the table only counts the pin.
class SlotHandle {
 public:
  SlotHandle() = default;
  SlotHandle(SlotTable* table, SlotId slot, void* data, uint64_t size)
      : table_(table), slot_(slot), data_(data), size_(size) {}
  ~SlotHandle() { release(); }
  SlotHandle(SlotHandle&& o) noexcept { *this = std::move(o); }
  SlotHandle& operator=(SlotHandle&& o) noexcept {
    if (this != &o) {
      release();
      table_ = std::exchange(o.table_, nullptr);
      slot_ = std::exchange(o.slot_, kNoSlot);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  SlotHandle(const SlotHandle&) = delete;
  SlotHandle& operator=(const SlotHandle&) = delete;

  bool valid() const { return table_ != nullptr; }
  SlotId slot() const { return slot_; }
  Key key() const { return table_->key(slot_); }
  void* data() const { return data_; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(data_); }
  uint64_t size() const { return size_; }
  void release() {
    if (table_) table_->unpin(slot_);
    table_ = nullptr;
  }

 private:
  SlotTable* table_ = nullptr;
  SlotId slot_ = kNoSlot;
  void* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace df::cache
