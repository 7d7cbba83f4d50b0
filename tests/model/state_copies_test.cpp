// The bookkeeping of a hybrid sequence's state copies (model/state_copies.h), which the CPU's hybrid sequence and
// the GPU session share: where an eval keeps its copies, which copy a truncation restores, and that a sequence
// never needs more than kStateSnapshots + 1 copies' storage (the GPU session allocates exactly that many).
#include "diskformer/model/state_copies.h"

#include <gtest/gtest.h>

#include <random>

namespace df::test {
namespace {

using model::kSnapshotLead;
using model::kStateSnapshots;
using model::snapshot_lead;

struct Copy {
  uint32_t n_past = 0;
  int id = 0;  // which storage it is
};

TEST(StateCopies, LeadCopyOnlyForPromptsLongerThanTheLead) {
  EXPECT_EQ(snapshot_lead(0, 14, 14), 14 - kSnapshotLead);
  EXPECT_EQ(snapshot_lead(0, kSnapshotLead, kSnapshotLead), 0u);
  EXPECT_EQ(snapshot_lead(0, kSnapshotLead + 1, kSnapshotLead + 1), 1u);
  EXPECT_EQ(snapshot_lead(20, 21, 1), 0u);  // a decode step
  // Recomputed positions count: 3 new tokens after 10 kept ones whose state went back to position 4.
  EXPECT_EQ(snapshot_lead(4, 17, 3), 17 - kSnapshotLead);
}

TEST(StateCopies, RestoresTheNewestAtOrBeforeAndDropsLaterOnes) {
  model::StateCopies<Copy> c;
  int made = 0;
  auto make = [&] { return Copy{0, made++}; };
  for (uint32_t pos : {6u, 14u, 30u}) {
    Copy s = c.take(make);
    s.n_past = pos;
    c.keep(s);
  }
  EXPECT_EQ(c.at_or_before(13)->n_past, 6u);
  EXPECT_EQ(c.at_or_before(14)->n_past, 14u);
  EXPECT_EQ(c.at_or_before(5), nullptr);
  c.drop_after(14);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.at_or_before(100)->n_past, 14u);
  // A dropped copy's storage is taken again before anything new is made.
  const Copy s = c.take(make);
  EXPECT_EQ(s.id, 2);
  EXPECT_EQ(made, 3);
  // Keeping a copy drops those at or after its position.
  c.keep(Copy{10, s.id});
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.at_or_before(100)->n_past, 10u);
}

// Evals and truncations at random, as a sequence makes them: at most kStateSnapshots copies, and storage for at
// most kStateSnapshots + 1 ever made.
TEST(StateCopies, StorageStaysWithinTheCopiesAndOneSpare) {
  std::mt19937 rng(5);
  model::StateCopies<Copy> c;
  int made = 0;
  auto make = [&] { return Copy{0, made++}; };
  uint32_t n_past = 0;
  for (int step = 0; step < 2000; ++step) {
    if (rng() % 4 == 0 && n_past > 0) {
      n_past = uint32_t(rng() % n_past);
      c.drop_after(n_past);
      const Copy* back = c.at_or_before(n_past);
      n_past = back ? back->n_past : 0;  // the state goes back; the kept tokens are recomputed by the next eval
      continue;
    }
    const uint32_t n_new = 1 + uint32_t(rng() % 20), start = n_past, end = n_past + n_new + uint32_t(rng() % 3);
    const uint32_t lead = snapshot_lead(start, end, n_new);
    if (lead) {
      Copy s = c.take(make);
      s.n_past = lead;
      c.keep(s);
    }
    if (n_new >= 2) {
      Copy s = c.take(make);
      s.n_past = end;
      c.keep(s);
    }
    n_past = end;
    ASSERT_LE(c.size(), kStateSnapshots);
    ASSERT_LE(made, int(kStateSnapshots) + 1);
  }
  EXPECT_GE(made, int(kStateSnapshots));  // every copy was in use at some point
}

}  // namespace
}  // namespace df::test
