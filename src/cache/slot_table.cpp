#include "diskformer/cache/slot_table.h"

#include "diskformer/util/check.h"

namespace df::cache {

SlotTable::SlotTable(uint32_t n_slots) : slots_(n_slots) {
  DF_CHECK(n_slots != kNoSlot);  // 0: a table that holds nothing (an admission table without a spill part)
  index_.reserve(n_slots);
  free_.reserve(n_slots);
  // Free slots are taken from the back: lowest index first.
  for (uint32_t i = n_slots; i-- > 0;) free_.push_back(i);
}

SlotTable::Acquired SlotTable::acquire(Key key) {
  Acquired a;
  SlotId s = find(key);
  if (s != kNoSlot) {
    Slot& slot = slots_[s];
    if (slot.state == SlotState::kReady) {
      a.outcome = Outcome::kHit;
      stats_.hits++;
    } else {
      DF_CHECK(slot.state == SlotState::kLoading);
      if (slot.prefetched) {
        a.outcome = Outcome::kLateHit;
        stats_.late_hits++;
      } else {
        a.outcome = Outcome::kPending;  // the same record asked for twice before its read finished: no new read
        stats_.hits++;
      }
    }
    if (slot.prefetched) {
      stats_.prefetch_used++;
      slot.prefetched = false;
    }
    a.slot = s;
    pin(s);
    return a;
  }
  a = take_slot(key);
  if (a.slot == kNoSlot) return a;  // kFull: neither a hit nor a miss yet; the caller may wait and ask again
  stats_.misses++;
  a.outcome = Outcome::kMiss;
  pin(a.slot);
  return a;
}

SlotTable::Acquired SlotTable::claim_for_prefetch(Key key) {
  if (find(key) != kNoSlot) return {};
  Acquired a = take_slot(key);
  if (a.slot == kNoSlot) {
    stats_.prefetch_dropped++;
    return a;
  }
  slots_[a.slot].prefetched = true;
  stats_.prefetch_issued++;
  return a;
}

SlotTable::Acquired SlotTable::take_slot(Key key) {
  Acquired a;
  SlotId s;
  if (!free_.empty()) {
    s = free_.back();
    free_.pop_back();
  } else if (lru_head_ != kNoSlot) {
    s = lru_head_;
    Slot& victim = slots_[s];
    DF_CHECK(victim.state == SlotState::kReady && victim.pins == 0);
    lru_remove(s);
    index_.erase(victim.key);
    a.evicted = true;
    a.evicted_key = victim.key;
    stats_.evictions++;
    if (victim.prefetched) stats_.prefetch_evicted_unused++;
  } else {
    a.outcome = Outcome::kFull;
    return a;
  }
  Slot& slot = slots_[s];
  slot.key = key;
  slot.state = SlotState::kLoading;
  slot.prefetched = false;
  index_.emplace(key, s);
  loading_++;
  unpinned_loading_++;  // until someone pins it
  a.slot = s;
  return a;
}

void SlotTable::loaded(SlotId s, bool ok, uint64_t bytes) {
  Slot& slot = slots_[s];
  DF_CHECK(slot.state == SlotState::kLoading);
  loading_--;
  if (slot.pins == 0) unpinned_loading_--;
  if (ok) {
    slot.state = SlotState::kReady;
    stats_.bytes_loaded += bytes;
    if (slot.pins == 0) lru_push_back(s);
    return;
  }
  stats_.load_errors++;
  index_.erase(slot.key);
  slot.prefetched = false;
  if (slot.pins == 0) {
    make_free(s);
  } else {
    slot.state = SlotState::kFailed;
  }
}

void SlotTable::pin(SlotId s) {
  Slot& slot = slots_[s];
  DF_CHECK(slot.state != SlotState::kFree);
  if (slot.pins++ == 0) {
    pinned_++;
    if (slot.state == SlotState::kReady) lru_remove(s);
    if (slot.state == SlotState::kLoading) unpinned_loading_--;
  }
}

void SlotTable::unpin(SlotId s) {
  Slot& slot = slots_[s];
  DF_CHECK(slot.pins > 0);
  if (--slot.pins > 0) return;
  pinned_--;
  if (slot.state == SlotState::kReady) {
    lru_push_back(s);
  } else if (slot.state == SlotState::kFailed) {
    make_free(s);
  } else if (slot.state == SlotState::kLoading) {
    unpinned_loading_++;  // its waiter gave up; it stays off the LRU list until loaded() makes it ready
  }
}

void SlotTable::clear_unpinned() {
  while (lru_head_ != kNoSlot) {
    SlotId s = lru_head_;
    lru_remove(s);
    index_.erase(slots_[s].key);
    make_free(s);
  }
}

bool SlotTable::next_victim(Key* victim) const {
  if (!free_.empty() || lru_head_ == kNoSlot) return false;
  *victim = slots_[lru_head_].key;
  return true;
}

SlotId SlotTable::find(Key key) const {
  auto it = index_.find(key);
  return it == index_.end() ? kNoSlot : it->second;
}

uint32_t SlotTable::ready_slots() const {
  uint32_t n = 0;
  for (const auto& s : slots_) n += s.state == SlotState::kReady;
  return n;
}

std::vector<Key> SlotTable::lru_order() const {
  std::vector<Key> keys;
  for (SlotId s = lru_head_; s != kNoSlot; s = slots_[s].next) keys.push_back(slots_[s].key);
  return keys;
}

void SlotTable::lru_push_back(SlotId s) {
  Slot& slot = slots_[s];
  slot.prev = lru_tail_;
  slot.next = kNoSlot;
  if (lru_tail_ != kNoSlot) {
    slots_[lru_tail_].next = s;
  } else {
    lru_head_ = s;
  }
  lru_tail_ = s;
}

void SlotTable::lru_remove(SlotId s) {
  Slot& slot = slots_[s];
  if (slot.prev != kNoSlot) {
    slots_[slot.prev].next = slot.next;
  } else {
    DF_CHECK(lru_head_ == s);
    lru_head_ = slot.next;
  }
  if (slot.next != kNoSlot) {
    slots_[slot.next].prev = slot.prev;
  } else {
    DF_CHECK(lru_tail_ == s);
    lru_tail_ = slot.prev;
  }
  slot.prev = slot.next = kNoSlot;
}

void SlotTable::make_free(SlotId s) {
  Slot& slot = slots_[s];
  slot.state = SlotState::kFree;
  slot.prefetched = false;
  slot.key = 0;
  free_.push_back(s);
}

}  // namespace df::cache
