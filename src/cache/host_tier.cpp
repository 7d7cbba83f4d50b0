#include "diskformer/cache/host_tier.h"

#include <algorithm>

#include "diskformer/util/check.h"

namespace df::cache {

Result<std::unique_ptr<HostTier>> HostTier::create(std::unique_ptr<io::Reader> reader, Locator locate,
                                                   const HostTierOptions& o) {
  const uint64_t records = uint64_t(o.n_layers) * o.n_index;
  if (records == 0 || records > UINT32_MAX) return Error{"RAM tier: " + std::to_string(records) + " records"};
  std::unique_ptr<HostTier> t(new HostTier(o));
  SlotPoolOptions po;
  po.slots = o.resident ? uint32_t(records) : uint32_t(std::min<uint64_t>(o.slots, records));
  po.slot_bytes = o.slot_bytes;
  // A resident tier reads everything once and never reads ahead.
  po.max_prefetch = o.resident ? 0 : std::min(o.max_prefetch, po.slots / 2);
  po.allocator = o.allocator;
  t->options_.max_prefetch = po.max_prefetch;
  DF_ASSIGN(t->pool_, HostSlotPool::create(std::move(reader), std::move(locate), po));
  if (o.resident) DF_TRY(t->load_all());
  t->options_.on_load = nullptr;  // the caller's, for creation only
  return t;
}

// Every record, in batches that keep many reads in flight, then unpinned: they stay, there being a slot for each.
Status HostTier::load_all() {
  constexpr uint64_t kBatch = 256;
  const uint64_t records = uint64_t(options_.n_layers) * options_.n_index;
  std::vector<Key> keys;
  for (uint64_t k0 = 0; k0 < records; k0 += kBatch) {
    keys.clear();
    for (uint64_t k = k0; k < std::min(records, k0 + kBatch); ++k) keys.push_back(k);
    const uint64_t before = pool_->stats().bytes_loaded;
    DF_ASSIGN(std::vector<SlotHandle> handles, pool_->get_many(keys));
    if (options_.on_load) options_.on_load(pool_->stats().bytes_loaded - before);
  }
  initial_bytes_ = pool_->stats().bytes_loaded;
  pool_->reset_stats();
  return {};
}

uint32_t HostTier::max_acquire() const { return pool_->slots() - options_.max_prefetch; }

Result<Pins> HostTier::acquire(uint32_t layer, std::span<const int32_t> ids) {
  DF_CHECK(layer < options_.n_layers && ids.size() <= max_acquire());
  keys_.clear();
  for (int32_t id : ids) {
    DF_CHECK(id >= 0 && uint32_t(id) < options_.n_index);
    keys_.push_back(key(layer, id));
  }
  DF_ASSIGN(std::vector<SlotHandle> handles, pool_->get_many(keys_));
  std::vector<Pins::Entry> entries;
  entries.reserve(handles.size());
  for (SlotHandle& h : handles) {
    const SlotId s = h.slot();
    entries.push_back({std::move(h), s});
  }
  return Pins(this, std::move(entries));
}

void HostTier::prefetch(uint32_t layer, std::span<const int32_t> ids) {
  if (options_.resident || options_.max_prefetch == 0) return;
  keys_.clear();
  for (int32_t id : ids)
    if (layer < options_.n_layers && id >= 0 && uint32_t(id) < options_.n_index) keys_.push_back(key(layer, id));
  pool_->prefetch(keys_);
}

}  // namespace df::cache
