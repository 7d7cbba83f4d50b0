// A slot table for a tier far smaller than the cycle of records it serves (a GPU holding a few percent of a
// model's experts): the slots are a main part and a small spill part, each an LRU SlotTable, under one slot
// numbering (main slots first). A missed record takes a main slot only when one is free or when it has been used
// more recently-often than the main part's LRU victim (use counts halve every few lookups per record); otherwise it
// passes through the spill part. Decode visits every layer's experts in turn, a cycle much larger than the cache:
// plain LRU would evict each record just before its next use, where this keeps a stable, most used subset.
//
// Host bookkeeping only; a tier puts memory and loading around it. Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "diskformer/cache/slot_table.h"

namespace df::cache {

class AdmissionTable {
 public:
  // n_keys: keys are 0 .. n_keys - 1. spill: slots of the spill part (< slots; 0: plain LRU).
  AdmissionTable(uint32_t slots, uint32_t spill, uint64_t n_keys);

  struct Acquired {
    SlotTable::Outcome outcome = SlotTable::Outcome::kFull;
    SlotId slot = kNoSlot;       // in 0 .. size()-1
    SlotTable* table = nullptr;  // the part holding it, and its slot there (for loaded() and the pin)
    SlotId local = kNoSlot;
  };
  // Counts a use of key, then as SlotTable::acquire in the part that holds it or admits it (pinned unless kFull).
  Acquired acquire(Key key);
  // A slot for a read ahead of key, claimed as SlotTable::claim_for_prefetch in the part admission picks; slot
  // kNoSlot when present, loading or nothing is evictable. Not counted as a use.
  Acquired claim_for_prefetch(Key key);
  // The load into (table, local) finished.
  static void loaded(const Acquired& a, bool ok, uint64_t bytes) { a.table->loaded(a.local, ok, bytes); }

  bool contains(Key key) const;  // present and ready
  // The slot holding key (ready or loading), kNoSlot otherwise.
  SlotId find(Key key) const;
  uint32_t size() const { return main_.size() + spill_.size(); }
  uint32_t spill_slots() const { return spill_.size(); }
  // Slots some pin holds, in either part.
  uint32_t pinned_slots() const { return main_.pinned_slots() + spill_.pinned_slots(); }
  CacheStats stats() const;  // both parts' counters summed
  void reset_stats();

 private:
  SlotTable& admit(Key key);  // the part a missing key goes to
  SlotId global(const SlotTable* t, SlotId local) const { return t == &spill_ ? main_.size() + local : local; }

  SlotTable main_, spill_;
  std::vector<uint16_t> uses_;  // per key: acquires, halved every decay_every_ lookups
  uint64_t lookups_ = 0, decay_every_ = 0;
};

}  // namespace df::cache
