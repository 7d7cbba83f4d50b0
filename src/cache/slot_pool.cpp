#include "diskformer/cache/slot_pool.h"

#include <chrono>

#include "diskformer/util/check.h"

namespace df::cache {
namespace {

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

}  // namespace

Result<std::unique_ptr<HostSlotPool>> HostSlotPool::create(std::unique_ptr<io::Reader> reader, Locator locate,
                                                           const SlotPoolOptions& options) {
  if (!reader) return Error{"slot pool: no reader"};
  if (!locate) return Error{"slot pool: no locator"};
  if (options.slots == 0 || options.slot_bytes == 0)
    return Error{"slot pool: " + std::to_string(options.slots) + " slots of " + std::to_string(options.slot_bytes) +
                 " bytes: both must be positive"};
  std::unique_ptr<HostSlotPool> pool(new HostSlotPool(std::move(reader), std::move(locate), options));
  uint64_t total = pool->stride_ * options.slots;
  io::HostAllocator& allocator = options.allocator ? *options.allocator : io::default_host_allocator();
  auto memory = io::AlignedBuffer::allocate(total, io::kDirectAlignment, allocator);
  if (!memory.ok())
    return Error{"slot pool: " + std::to_string(options.slots) + " slots of " + std::to_string(pool->stride_) +
                 " bytes: " + memory.error().message};
  pool->memory_ = std::move(memory).value();
  if (options.register_memory && pool->reader_->in_flight() == 0)
    pool->registered_ = pool->reader_->register_memory(pool->memory_.data(), pool->memory_.size());
  return pool;
}

HostSlotPool::HostSlotPool(std::unique_ptr<io::Reader> reader, Locator locate, const SlotPoolOptions& options)
    : reader_(std::move(reader)),
      locate_(std::move(locate)),
      options_(options),
      stride_(io::align_up(options.slot_bytes, io::kDirectAlignment)),
      table_(options.slots),
      loads_(options.slots) {}

HostSlotPool::~HostSlotPool() {
  DF_CHECK_MSG(table_.pinned_slots() == 0, "a SlotHandle outlived its HostSlotPool");
  // The kernel may still be writing into slot memory: wait before it is freed.
  while (reader_->in_flight() > 0) {
    completions_.clear();
    reader_->poll(completions_, reader_->in_flight());
  }
  if (registered_) reader_->unregister_memory();
}

Status HostSlotPool::start_load(SlotId s, Key key, bool prefetch) {
  extents_.clear();
  Status located = locate_(key, extents_);
  if (!located.ok()) return Error{"record " + std::to_string(key) + ": " + located.error().message};
  requests_.clear();
  uint64_t bytes = 0;
  for (size_t i = 0; i < extents_.size(); i++) {
    const Extent& e = extents_[i];
    if (e.slot_offset > options_.slot_bytes || e.length > options_.slot_bytes - e.slot_offset)
      return Error{"record " + std::to_string(key) + ": extent " + std::to_string(i) + " (" +
                   std::to_string(e.length) + " bytes at slot offset " + std::to_string(e.slot_offset) +
                   ") does not fit a slot of " + std::to_string(options_.slot_bytes) + " bytes"};
    requests_.push_back({.file = e.file, .offset = e.offset, .length = e.length, .dst = slot_data(s) + e.slot_offset,
                         .user_data = s});
    bytes += e.length;
  }
  loads_[s] = Load{.reads_left = uint32_t(requests_.size()), .bytes = bytes, .prefetch = prefetch};
  if (prefetch) prefetch_in_flight_++;
  if (requests_.empty()) {
    if (prefetch) prefetch_in_flight_--;
    table_.loaded(s, true, 0);
    return Status::Ok();
  }
  reader_->submit(requests_);
  return Status::Ok();
}

void HostSlotPool::on_completion(io::Completion& c) {
  auto s = SlotId(c.user_data);
  Load& load = loads_[s];
  DF_CHECK(load.reads_left > 0);
  if (!c.status.ok() && load.status.ok()) load.status = std::move(c.status);
  if (--load.reads_left > 0) return;
  if (load.prefetch) prefetch_in_flight_--;
  table_.loaded(s, load.status.ok(), load.bytes);
}

void HostSlotPool::wait_one() {
  DF_CHECK(reader_->in_flight() > 0);
  completions_.clear();
  reader_->poll(completions_, 1);
  for (auto& c : completions_) on_completion(c);
}

void HostSlotPool::poll() {
  if (reader_->in_flight() == 0) return;
  completions_.clear();
  reader_->poll(completions_, 0);
  for (auto& c : completions_) on_completion(c);
}

void HostSlotPool::wait_prefetches() {
  while (prefetch_in_flight_ > 0) wait_one();
}

Result<std::vector<SlotHandle>> HostSlotPool::get_many(std::span<const Key> keys) {
  poll();
  std::vector<SlotHandle> out;
  out.reserve(keys.size());
  uint64_t waited = 0;
  for (Key key : keys) {
    SlotTable::Acquired a;
    for (;;) {
      a = table_.acquire(key);
      if (a.outcome != SlotTable::Outcome::kFull) break;
      // Prefetches in flight hold slots nobody has pinned: once they land they are evictable.
      if (table_.unpinned_loading() == 0)
        return Error{"slot pool: all " + std::to_string(table_.size()) + " slots are pinned (" +
                     std::to_string(table_.pinned_slots()) + " pinned, " + std::to_string(table_.loading_slots()) +
                     " loading): cannot load record " + std::to_string(key) + "; release handles or add slots"};
      uint64_t t = now_ns();
      wait_one();
      waited += now_ns() - t;
    }
    out.push_back(handle(a.slot));
    if (a.outcome == SlotTable::Outcome::kMiss) {
      Status st = start_load(a.slot, key, false);
      if (!st.ok()) {
        table_.loaded(a.slot, false, 0);
        return st.take_error();
      }
    }
  }
  uint64_t t = now_ns();
  for (const SlotHandle& h : out) {
    while (table_.state(h.slot()) == SlotState::kLoading) wait_one();
    if (table_.state(h.slot()) == SlotState::kFailed) {
      table_.stats().wait_ns += waited + now_ns() - t;
      return Error{loads_[h.slot()].status.error().message};
    }
  }
  table_.stats().wait_ns += waited + now_ns() - t;
  return out;
}

Result<SlotHandle> HostSlotPool::get(Key key) {
  DF_ASSIGN(auto handles, get_many({&key, 1}));
  return std::move(handles[0]);
}

void HostSlotPool::prefetch(std::span<const Key> keys) {
  poll();
  for (Key key : keys) {
    if (prefetch_in_flight_ >= options_.max_prefetch) {
      if (table_.find(key) == kNoSlot) table_.stats().prefetch_dropped++;
      continue;
    }
    SlotTable::Acquired a = table_.claim_for_prefetch(key);
    if (a.slot == kNoSlot) continue;
    // A record that cannot be located is left for get() to report.
    if (!start_load(a.slot, key, true).ok()) table_.loaded(a.slot, false, 0);
  }
}

bool HostSlotPool::contains(Key key) const {
  SlotId s = table_.find(key);
  return s != kNoSlot && table_.state(s) == SlotState::kReady;
}

}  // namespace df::cache
