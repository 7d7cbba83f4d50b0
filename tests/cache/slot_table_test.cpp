// The bookkeeping alone: LRU order, pins, the all-pinned answer, prefetch accounting, failed loads.
#include <gtest/gtest.h>

#include <random>

#include "diskformer/cache/slot_table.h"

namespace df::cache {
namespace {

using Outcome = SlotTable::Outcome;

// Acquires key as a miss, marks it loaded and unpins it: the key ends most recently used.
SlotId load(SlotTable& t, Key key) {
  auto a = t.acquire(key);
  EXPECT_EQ(a.outcome, Outcome::kMiss) << key;
  t.loaded(a.slot, true, 100);
  t.unpin(a.slot);
  return a.slot;
}

TEST(SlotTable, LeastRecentlyUsedIsEvictedFirst) {
  SlotTable t(3);
  load(t, 1);
  load(t, 2);
  load(t, 3);
  EXPECT_EQ(t.lru_order(), (std::vector<Key>{1, 2, 3}));
  auto a = t.acquire(1);  // a hit makes 1 the most recent once unpinned
  EXPECT_EQ(a.outcome, Outcome::kHit);
  t.unpin(a.slot);
  EXPECT_EQ(t.lru_order(), (std::vector<Key>{2, 3, 1}));
  auto b = t.acquire(4);
  EXPECT_EQ(b.outcome, Outcome::kMiss);
  EXPECT_TRUE(b.evicted);
  EXPECT_EQ(b.evicted_key, 2u);
  EXPECT_EQ(t.find(2), kNoSlot);
  t.loaded(b.slot, true, 100);
  t.unpin(b.slot);
  EXPECT_EQ(t.lru_order(), (std::vector<Key>{3, 1, 4}));
  const CacheStats& s = t.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.bytes_loaded, 400u);
}

// next_victim names what a miss would evict, without evicting: nothing while a slot is free, the LRU key after,
// nothing when every slot is pinned.
TEST(SlotTable, NextVictimNamesTheLruKeyWithoutEvicting) {
  SlotTable t(2);
  Key v = 99;
  EXPECT_FALSE(t.next_victim(&v));
  EXPECT_TRUE(t.has_free_slot());
  load(t, 1);
  EXPECT_FALSE(t.next_victim(&v));
  load(t, 2);
  EXPECT_FALSE(t.has_free_slot());
  ASSERT_TRUE(t.next_victim(&v));
  EXPECT_EQ(v, 1u);
  EXPECT_EQ(t.stats().evictions, 0u);
  auto a = t.acquire(1);  // 1 pinned: 2 is the only evictable key
  ASSERT_TRUE(t.next_victim(&v));
  EXPECT_EQ(v, 2u);
  auto b = t.acquire(2);
  v = 99;
  EXPECT_FALSE(t.next_victim(&v));
  EXPECT_EQ(v, 99u);
  t.unpin(a.slot);
  t.unpin(b.slot);
}

TEST(SlotTable, PinnedSlotsAreNeverEvicted) {
  SlotTable t(4);
  auto held = t.acquire(100);
  t.loaded(held.slot, true, 1);  // stays pinned
  for (Key k = 0; k < 50; k++) load(t, k);
  EXPECT_EQ(t.find(100), held.slot);
  EXPECT_EQ(t.state(held.slot), SlotState::kReady);
  for (Key k : t.lru_order()) EXPECT_NE(k, 100u);
  t.unpin(held.slot);
  EXPECT_EQ(t.lru_order().back(), 100u);
}

TEST(SlotTable, EveryslotPinnedAnswersFullAndRecovers) {
  SlotTable t(2);
  auto a = t.acquire(1);
  auto b = t.acquire(2);
  t.loaded(a.slot, true, 1);
  t.loaded(b.slot, true, 1);
  auto c = t.acquire(3);
  EXPECT_EQ(c.outcome, Outcome::kFull);
  EXPECT_EQ(c.slot, kNoSlot);
  EXPECT_EQ(t.stats().misses, 2u);  // a kFull answer is neither a hit nor a miss
  EXPECT_EQ(t.pinned_slots(), 2u);
  t.unpin(a.slot);
  auto d = t.acquire(3);
  EXPECT_EQ(d.outcome, Outcome::kMiss);
  EXPECT_EQ(d.evicted_key, 1u);
}

TEST(SlotTable, LoadingSlotsAreNotEvictable) {
  SlotTable t(2);
  auto p = t.claim_for_prefetch(7);
  ASSERT_NE(p.slot, kNoSlot);
  EXPECT_EQ(t.unpinned_loading(), 1u);
  auto a = t.acquire(8);
  EXPECT_EQ(a.outcome, Outcome::kMiss);
  EXPECT_EQ(t.acquire(9).outcome, Outcome::kFull);  // 7 is loading, 8 is pinned
  t.loaded(p.slot, true, 1);
  EXPECT_EQ(t.unpinned_loading(), 0u);
  auto b = t.acquire(9);
  EXPECT_EQ(b.outcome, Outcome::kMiss);
  EXPECT_EQ(b.evicted_key, 7u);
  EXPECT_EQ(t.stats().prefetch_evicted_unused, 1u);
}

TEST(SlotTable, PrefetchAccounting) {
  SlotTable t(4);
  auto p1 = t.claim_for_prefetch(1);
  auto p2 = t.claim_for_prefetch(2);
  EXPECT_EQ(t.claim_for_prefetch(1).slot, kNoSlot);  // already loading: not counted
  EXPECT_EQ(t.stats().prefetch_issued, 2u);
  EXPECT_EQ(t.stats().prefetch_dropped, 0u);

  auto late = t.acquire(1);  // still loading: a late hit
  EXPECT_EQ(late.outcome, Outcome::kLateHit);
  EXPECT_EQ(late.slot, p1.slot);
  t.loaded(p1.slot, true, 10);
  t.unpin(p1.slot);

  t.loaded(p2.slot, true, 10);
  auto hit = t.acquire(2);  // arrived before it was asked for
  EXPECT_EQ(hit.outcome, Outcome::kHit);
  t.unpin(hit.slot);
  auto again = t.acquire(2);  // a second use is a plain hit, not another prefetch use
  t.unpin(again.slot);

  const CacheStats& s = t.stats();
  EXPECT_EQ(s.late_hits, 1u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.prefetch_used, 2u);
  EXPECT_DOUBLE_EQ(s.hit_rate(), 1.0);

  // Fill the table with pins: nothing left to prefetch into.
  std::vector<SlotTable::Acquired> pins;
  for (Key k = 10; k < 14; k++) pins.push_back(t.acquire(k));
  EXPECT_EQ(t.claim_for_prefetch(20).slot, kNoSlot);
  EXPECT_EQ(t.stats().prefetch_dropped, 1u);
}

TEST(SlotTable, FailedLoadForgetsTheKeyAndFreesTheSlotOnUnpin) {
  SlotTable t(1);
  auto a = t.acquire(5);
  t.loaded(a.slot, false, 0);
  EXPECT_EQ(t.state(a.slot), SlotState::kFailed);
  EXPECT_EQ(t.find(5), kNoSlot);
  EXPECT_EQ(t.stats().load_errors, 1u);
  EXPECT_EQ(t.acquire(6).outcome, Outcome::kFull);  // the failed slot is still pinned
  t.unpin(a.slot);
  EXPECT_EQ(t.state(a.slot), SlotState::kFree);
  auto b = t.acquire(5);
  EXPECT_EQ(b.outcome, Outcome::kMiss);
  EXPECT_FALSE(b.evicted);
}

TEST(SlotTable, HandlesUnpinWhenTheyDie) {
  SlotTable t(2);
  auto a = t.acquire(1);
  t.loaded(a.slot, true, 1);
  {
    SlotHandle h(&t, a.slot, nullptr, 0);
    SlotHandle moved = std::move(h);
    EXPECT_FALSE(h.valid());
    EXPECT_TRUE(moved.valid());
    EXPECT_EQ(moved.key(), 1u);
    EXPECT_EQ(t.pins(a.slot), 1u);
  }
  EXPECT_EQ(t.pins(a.slot), 0u);
  EXPECT_EQ(t.pinned_slots(), 0u);
  EXPECT_EQ(t.lru_order(), (std::vector<Key>{1}));
}

// Random operations against a plain model of LRU order.
TEST(SlotTable, MatchesAModelUnderRandomUse) {
  constexpr uint32_t kSlots = 8;
  SlotTable t(kSlots);
  std::vector<Key> model;  // least recent first
  std::mt19937 rng(3);
  for (int step = 0; step < 5000; step++) {
    Key k = rng() % 20;
    auto a = t.acquire(k);
    auto it = std::find(model.begin(), model.end(), k);
    if (it != model.end()) {
      ASSERT_EQ(a.outcome, Outcome::kHit);
      model.erase(it);
    } else {
      ASSERT_EQ(a.outcome, Outcome::kMiss);
      if (model.size() == kSlots) {
        ASSERT_TRUE(a.evicted);
        ASSERT_EQ(a.evicted_key, model.front());
        model.erase(model.begin());
      } else {
        ASSERT_FALSE(a.evicted);
      }
      t.loaded(a.slot, true, 1);
    }
    t.unpin(a.slot);
    model.push_back(k);
    ASSERT_EQ(t.lru_order(), model);
  }
}

}  // namespace
}  // namespace df::cache
