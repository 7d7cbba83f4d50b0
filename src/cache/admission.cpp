#include "diskformer/cache/admission.h"

#include "diskformer/util/check.h"

namespace df::cache {

namespace {
// Use counts halve after this many lookups per record: a few tokens' worth of decode.
constexpr uint64_t kDecayLookupsPerRecord = 2;
}  // namespace

AdmissionTable::AdmissionTable(uint32_t slots, uint32_t spill, uint64_t n_keys)
    : main_(slots - spill), spill_(spill), uses_(n_keys, 0), decay_every_(kDecayLookupsPerRecord * n_keys) {
  DF_CHECK(spill < slots || slots == 0);
}

SlotTable& AdmissionTable::admit(Key key) {
  if (spill_.size() == 0) return main_;
  Key victim = 0;
  SlotTable* pick = &spill_;  // also when every main slot is pinned
  if (main_.has_free_slot()) {
    pick = &main_;
  } else if (main_.next_victim(&victim)) {
    // Strictly more uses than the victim: a cycle of equally used records leaves the main part as it is.
    pick = uses_[key] > uses_[victim] ? &main_ : &spill_;
  }
  // A part whose slots are all pinned or loading cannot take it; the other one does.
  if (!pick->has_free_slot() && !pick->next_victim(&victim)) return pick == &main_ ? spill_ : main_;
  return *pick;
}

AdmissionTable::Acquired AdmissionTable::acquire(Key key) {
  DF_CHECK(key < uses_.size());
  if (uses_[key] < UINT16_MAX) ++uses_[key];
  if (++lookups_ % decay_every_ == 0)
    for (uint16_t& u : uses_) u /= 2;
  SlotTable* t = spill_.find(key) != kNoSlot ? &spill_ : main_.find(key) != kNoSlot ? &main_ : &admit(key);
  const SlotTable::Acquired a = t->acquire(key);
  if (a.outcome == SlotTable::Outcome::kFull) return {};
  return {a.outcome, global(t, a.slot), t, a.slot};
}

AdmissionTable::Acquired AdmissionTable::claim_for_prefetch(Key key) {
  DF_CHECK(key < uses_.size());
  if (find(key) != kNoSlot) return {};
  SlotTable& t = admit(key);
  const SlotTable::Acquired a = t.claim_for_prefetch(key);
  if (a.slot == kNoSlot) return {};
  return {SlotTable::Outcome::kMiss, global(&t, a.slot), &t, a.slot};
}

SlotId AdmissionTable::find(Key key) const {
  for (const SlotTable* t : {&main_, &spill_}) {
    const SlotId s = t->find(key);
    if (s != kNoSlot) return global(t, s);
  }
  return kNoSlot;
}

bool AdmissionTable::contains(Key key) const {
  for (const SlotTable* t : {&main_, &spill_}) {
    const SlotId s = t->find(key);
    if (s != kNoSlot && t->state(s) == SlotState::kReady) return true;
  }
  return false;
}

CacheStats AdmissionTable::stats() const {
  CacheStats s = main_.stats();
  s += spill_.stats();
  return s;
}

void AdmissionTable::reset_stats() { main_.stats() = spill_.stats() = CacheStats{}; }

}  // namespace df::cache
