// The host pool over a real file: bytes of every record, pins under churn, the all-pinned error, prefetch hits and
// late hits, and read errors.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "diskformer/cache/slot_pool.h"
#include "io/io_support.h"
#include "support/test_paths.h"

namespace df::cache {
namespace {

// A record k is three slices of the file, like one expert's gate, up and down tensors in an in-place GGUF:
// gate at k * 3000 + 17 (3000 bytes), up at 1 MiB + k * 3000 + 5 (3000 bytes), down at 2 MiB + k * 1500 (1500 bytes),
// packed into the slot at 0, 4096 and 8192.
constexpr uint64_t kRecords = 300;
constexpr uint64_t kSlotBytes = 8192 + 1500;

std::vector<Extent> extents_of(io::FileId f, Key k) {
  return {{f, k * 3000 + 17, 3000, 0}, {f, (1u << 20) + k * 3000 + 5, 3000, 4096}, {f, (2u << 20) + k * 1500, 1500, 8192}};
}

// Delays completions for non-blocking polls while the gate is closed, so that a prefetch is still in flight when
// get() asks for its record (a late hit) however fast the disk is.
class GatedReader final : public io::Reader {
 public:
  explicit GatedReader(std::unique_ptr<io::Reader> inner) : Reader(inner->backend(), inner->options()), inner_(std::move(inner)) {}
  Result<io::FileId> open(const std::string& path) override { return inner_->open(path); }
  const io::FileInfo& file(io::FileId id) const override { return inner_->file(id); }
  void submit(std::span<const io::ReadRequest> r) override { inner_->submit(r); }
  size_t poll(std::vector<io::Completion>& out, size_t wait_for) override {
    if (closed && wait_for == 0) return 0;
    return inner_->poll(out, wait_for);
  }
  size_t in_flight() const override { return inner_->in_flight(); }
  bool closed = false;

 private:
  std::unique_ptr<io::Reader> inner_;
};

class SlotPoolTest : public ::testing::TestWithParam<io::Backend> {
 protected:
  void SetUp() override {
    DF_REQUIRE_BACKEND(GetParam());
    bytes_.resize(3u << 20);
    std::mt19937_64 rng(11);
    for (auto& b : bytes_) b = uint8_t(rng());
    path_ = (df::test::temp_dir("pool") / "records.bin").string();
    std::ofstream(path_, std::ios::binary).write(reinterpret_cast<const char*>(bytes_.data()), std::streamsize(bytes_.size()));
  }

  std::unique_ptr<HostSlotPool> make_pool(uint32_t slots, uint32_t max_prefetch = 8, GatedReader** gate = nullptr) {
    auto r = io::Reader::create({.backend = GetParam(), .queue_depth = 8});
    EXPECT_TRUE(r.ok());
    std::unique_ptr<io::Reader> reader = std::move(r).value();
    if (gate) {
      auto g = std::make_unique<GatedReader>(std::move(reader));
      *gate = g.get();
      reader = std::move(g);
    }
    auto f = reader->open(path_);
    EXPECT_TRUE(f.ok());
    io::FileId file = *f;
    Locator locate = [file](Key k, std::vector<Extent>& out) -> Status {
      if (k >= kRecords) return Error{"no record " + std::to_string(k)};
      for (const auto& e : extents_of(file, k)) out.push_back(e);
      return Status::Ok();
    };
    auto pool = HostSlotPool::create(std::move(reader), locate,
                                     {.slots = slots, .slot_bytes = kSlotBytes, .max_prefetch = max_prefetch});
    EXPECT_TRUE(pool.ok()) << (pool.ok() ? "" : pool.error().message);
    return std::move(pool).value();
  }

  void expect_record(const SlotHandle& h, Key k) {
    ASSERT_TRUE(h.valid());
    ASSERT_EQ(h.size(), kSlotBytes);
    for (const auto& e : extents_of(0, k))
      ASSERT_EQ(0, std::memcmp(h.bytes() + e.slot_offset, bytes_.data() + e.offset, e.length))
          << "record " << k << " extent at slot offset " << e.slot_offset;
  }

  std::vector<uint8_t> bytes_;
  std::string path_;
};

TEST_P(SlotPoolTest, GetReadsEveryExtentAndThenHits) {
  auto pool = make_pool(4);
  {
    auto h = pool->get(7);
    ASSERT_TRUE(h.ok()) << h.error().message;
    expect_record(*h, 7);
  }
  auto again = pool->get(7);
  ASSERT_TRUE(again.ok());
  expect_record(*again, 7);
  EXPECT_EQ(pool->stats().misses, 1u);
  EXPECT_EQ(pool->stats().hits, 1u);
  EXPECT_EQ(pool->stats().bytes_loaded, 7500u);
  EXPECT_EQ(pool->slot_stride() % io::kDirectAlignment, 0u);
}

TEST_P(SlotPoolTest, GetManyKeepsOrderAndRepeats) {
  auto pool = make_pool(8);
  std::vector<Key> keys = {5, 9, 5, 200, 0, 9};
  auto hs = pool->get_many(keys);
  ASSERT_TRUE(hs.ok()) << hs.error().message;
  ASSERT_EQ(hs->size(), keys.size());
  for (size_t i = 0; i < keys.size(); i++) expect_record((*hs)[i], keys[i]);
  EXPECT_EQ((*hs)[0].slot(), (*hs)[2].slot());
  EXPECT_EQ(pool->stats().misses, 4u);
  EXPECT_EQ(pool->table().pinned_slots(), 4u);
  hs->clear();
  EXPECT_EQ(pool->table().pinned_slots(), 0u);
}

TEST_P(SlotPoolTest, PinnedRecordSurvivesChurn) {
  auto pool = make_pool(3);
  auto held = pool->get(42);
  ASSERT_TRUE(held.ok());
  for (Key k = 100; k < 160; k++) {
    auto h = pool->get(k);
    ASSERT_TRUE(h.ok()) << h.error().message;
    expect_record(*h, k);
  }
  expect_record(*held, 42);
  EXPECT_TRUE(pool->contains(42));
  EXPECT_GE(pool->stats().evictions, 55u);
}

TEST_P(SlotPoolTest, AllPinnedIsAnErrorNotADeadlock) {
  auto pool = make_pool(2);
  auto a = pool->get(1);
  auto b = pool->get(2);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = pool->get(3);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("all 2 slots are pinned"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("record 3"), std::string::npos) << c.error().message;
  // A batch that needs more slots than exist fails the same way and keeps no pins.
  b->release();
  std::vector<Key> three = {4, 5, 6};
  EXPECT_FALSE(pool->get_many(three).ok());
  EXPECT_EQ(pool->table().pinned_slots(), 1u);
  auto d = pool->get(3);
  ASSERT_TRUE(d.ok()) << d.error().message;
  expect_record(*d, 3);
}

TEST_P(SlotPoolTest, PrefetchedRecordsAreHits) {
  auto pool = make_pool(8, 2);
  std::vector<Key> keys = {10, 11, 12, 13};
  pool->prefetch(keys);
  EXPECT_EQ(pool->stats().prefetch_issued, 2u);
  EXPECT_EQ(pool->stats().prefetch_dropped, 2u);
  EXPECT_LE(pool->prefetch_in_flight(), 2u);
  pool->wait_prefetches();
  EXPECT_TRUE(pool->contains(10));
  EXPECT_TRUE(pool->contains(11));
  EXPECT_FALSE(pool->contains(12));
  auto h = pool->get(10);
  ASSERT_TRUE(h.ok());
  expect_record(*h, 10);
  const CacheStats& s = pool->stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.late_hits, 0u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.prefetch_used, 1u);
}

TEST_P(SlotPoolTest, RecordStillArrivingIsALateHit) {
  GatedReader* gate = nullptr;
  auto pool = make_pool(8, 8, &gate);
  gate->closed = true;
  std::vector<Key> keys = {20, 21};
  pool->prefetch(keys);
  ASSERT_EQ(pool->prefetch_in_flight(), 2u);
  auto h = pool->get(20);  // its read is in flight: get waits for it instead of reading again
  ASSERT_TRUE(h.ok()) << h.error().message;
  expect_record(*h, 20);
  const CacheStats& s = pool->stats();
  EXPECT_EQ(s.late_hits, 1u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.prefetch_used, 1u);
  gate->closed = false;
  pool->wait_prefetches();
  EXPECT_EQ(pool->stats().bytes_loaded, 2u * 7500u);  // two records, nothing read twice
  EXPECT_TRUE(pool->contains(21));
}

TEST_P(SlotPoolTest, ErrorsNameTheRecordAndLeaveThePoolUsable) {
  auto pool = make_pool(2);
  auto missing = pool->get(kRecords + 5);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("record " + std::to_string(kRecords + 5)), std::string::npos)
      << missing.error().message;
  EXPECT_EQ(pool->table().pinned_slots(), 0u);
  auto ok = pool->get(1);
  ASSERT_TRUE(ok.ok());
  expect_record(*ok, 1);
}

TEST_P(SlotPoolTest, ReadErrorsComeBackFromGet) {
  auto r = io::Reader::create({.backend = GetParam()});
  ASSERT_TRUE(r.ok());
  auto f = (*r)->open(path_);
  ASSERT_TRUE(f.ok());
  uint64_t size = bytes_.size();
  Locator past_end = [&](Key k, std::vector<Extent>& out) -> Status {
    out.push_back({*f, k == 1 ? size - 100 : 0, 1000, 0});  // record 1 runs past the end of the file
    return Status::Ok();
  };
  auto pool = HostSlotPool::create(std::move(r).value(), past_end, {.slots = 2, .slot_bytes = 4096});
  ASSERT_TRUE(pool.ok());
  auto bad = (*pool)->get(1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("records.bin"), std::string::npos) << bad.error().message;
  EXPECT_EQ((*pool)->stats().load_errors, 1u);
  EXPECT_FALSE((*pool)->contains(1));
  EXPECT_TRUE((*pool)->get(0).ok());
  EXPECT_TRUE((*pool)->get(2).ok());  // the failed slot was freed, so both slots serve again
}

TEST_P(SlotPoolTest, RandomGetsAndPrefetchesKeepBytesRight) {
  auto pool = make_pool(16, 4);
  std::mt19937 rng(5);
  std::vector<SlotHandle> held;
  for (int step = 0; step < 400; step++) {
    if (rng() % 3 == 0) {
      std::vector<Key> guesses = {rng() % 40, rng() % 40, rng() % 40};
      pool->prefetch(guesses);
    }
    Key k = rng() % 40;
    auto h = pool->get(k);
    ASSERT_TRUE(h.ok()) << h.error().message;
    expect_record(*h, k);
    if (rng() % 4 == 0 && held.size() < 8) held.push_back(std::move(h).value());
    if (rng() % 5 == 0 && !held.empty()) held.erase(held.begin());
    for (const auto& x : held) expect_record(x, x.key());
  }
  held.clear();
  pool->wait_prefetches();
  const CacheStats& s = pool->stats();
  EXPECT_EQ(s.lookups(), 400u);
  EXPECT_LE(s.prefetch_used, s.prefetch_issued);
  EXPECT_EQ(pool->table().pinned_slots(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, SlotPoolTest, ::testing::Values(io::Backend::kUring, io::Backend::kPread),
                         [](const auto& info) { return std::string(io::backend_name(info.param)); });

}  // namespace
}  // namespace df::cache
