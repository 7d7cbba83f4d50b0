// Admission by use count: a cycle of records larger than the tier leaves the main part with the records used most
// (plain LRU would evict each one just before its next use); equally used records leave the main part alone.
#include <gtest/gtest.h>

#include "diskformer/cache/admission.h"

namespace df::cache {
namespace {

// Acquires key, marks a miss loaded, and unpins it.
SlotTable::Outcome use(AdmissionTable& t, Key key) {
  const AdmissionTable::Acquired a = t.acquire(key);
  EXPECT_NE(a.outcome, SlotTable::Outcome::kFull);
  if (a.outcome == SlotTable::Outcome::kMiss) AdmissionTable::loaded(a, true, 100);
  a.table->unpin(a.local);
  return a.outcome;
}

TEST(Admission, FrequentRecordsStayThroughALargerCycle) {
  // 8 main + 2 spill slots, 100 keys. Keys 0..7 are used every round, 8..99 once per round each.
  AdmissionTable t(10, 2, 100);
  uint64_t hot_hits = 0, rounds = 30;
  for (uint64_t r = 0; r < rounds; ++r) {
    for (Key k = 0; k < 8; ++k) hot_hits += use(t, k) == SlotTable::Outcome::kHit;
    for (Key k = 8 + r % 4; k < 100; k += 4) use(t, k);
  }
  // After the first round every hot key hits: the cold ones pass through the spill part.
  EXPECT_GE(hot_hits, (rounds - 1) * 8);
  for (Key k = 0; k < 8; ++k) EXPECT_TRUE(t.contains(k));
}

TEST(Admission, PlainLruWithoutASpillPart) {
  AdmissionTable t(4, 0, 10);
  for (Key k = 0; k < 5; ++k) EXPECT_EQ(use(t, k), SlotTable::Outcome::kMiss);
  EXPECT_FALSE(t.contains(0));  // the least recently used went
  EXPECT_TRUE(t.contains(4));
  EXPECT_EQ(t.stats().evictions, 1u);
}

TEST(Admission, ReadsAheadClaimAnEvictableSlotUncounted) {
  AdmissionTable t(4, 1, 10);
  const AdmissionTable::Acquired a = t.claim_for_prefetch(3);
  ASSERT_NE(a.slot, kNoSlot);
  EXPECT_EQ(t.find(3), a.slot);
  EXPECT_FALSE(t.contains(3));  // loading
  AdmissionTable::loaded(a, true, 10);
  EXPECT_TRUE(t.contains(3));
  EXPECT_EQ(t.claim_for_prefetch(3).slot, kNoSlot);  // present
  EXPECT_EQ(use(t, 3), SlotTable::Outcome::kHit);
  const CacheStats s = t.stats();
  EXPECT_EQ(s.prefetch_used, 1u);
  EXPECT_EQ(s.lookups(), 1u);
}

}  // namespace
}  // namespace df::cache
