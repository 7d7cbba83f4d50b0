// The row cache over a table of unaligned rows at an unaligned offset: warm ranges, gather with repeats, eviction
// keeping the id map right, batches larger than the cache, and errors.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "diskformer/cache/row_cache.h"
#include "io/io_support.h"
#include "support/test_paths.h"

namespace df::cache {
namespace {

constexpr uint64_t kRows = 1000, kRowBytes = 100, kTableOffset = 777;

class RowCacheTest : public ::testing::TestWithParam<io::Backend> {
 protected:
  void SetUp() override {
    DF_REQUIRE_BACKEND(GetParam());
    bytes_.resize(kTableOffset + kRows * kRowBytes + 50);
    std::mt19937_64 rng(21);
    for (auto& b : bytes_) b = uint8_t(rng());
    path_ = (df::test::temp_dir("rows") / "table.bin").string();
    std::ofstream(path_, std::ios::binary).write(reinterpret_cast<const char*>(bytes_.data()), std::streamsize(bytes_.size()));
  }

  std::unique_ptr<RowCache> make(uint32_t slots, uint64_t rows = kRows) {
    auto r = io::Reader::create({.backend = GetParam(), .queue_depth = 16});
    EXPECT_TRUE(r.ok());
    auto f = (*r)->open(path_);
    EXPECT_TRUE(f.ok());
    auto c = RowCache::create(std::move(r).value(),
                              {.file = *f, .table_offset = kTableOffset, .row_bytes = kRowBytes, .rows = rows, .slots = slots});
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
    return c.ok() ? std::move(c).value() : nullptr;
  }

  const uint8_t* row(uint64_t id) const { return bytes_.data() + kTableOffset + id * kRowBytes; }

  void expect_rows(const std::vector<uint32_t>& ids, const std::vector<uint8_t>& out) {
    for (size_t i = 0; i < ids.size(); i++)
      ASSERT_EQ(0, std::memcmp(out.data() + i * kRowBytes, row(ids[i]), kRowBytes)) << "position " << i << " id " << ids[i];
  }

  // Every id the map says is cached has its row in that slot.
  void expect_map_consistent(const RowCache& c) {
    for (uint64_t id = 0; id < kRows; id++) {
      int64_t s = c.slot_of(id);
      if (s >= 0) {
        ASSERT_EQ(0, std::memcmp(c.slot_data(uint32_t(s)), row(id), kRowBytes)) << "id " << id;
      }
    }
  }

  std::vector<uint8_t> bytes_;
  std::string path_;
};

TEST_P(RowCacheTest, WarmRowsAreLoadedUpFrontAndHit) {
  auto c = make(64);
  std::vector<RowRange> warm = {{500, 5}, {0, 10}};
  ASSERT_TRUE(c->warm(warm).ok());
  EXPECT_EQ(c->warm_slots(), 15u);
  EXPECT_EQ(c->lru_slots(), 49u);
  EXPECT_EQ(c->row_stats().bytes_loaded, 15 * kRowBytes);
  for (uint64_t id : {0, 9, 500, 504}) EXPECT_GE(c->slot_of(id), 0) << id;
  EXPECT_EQ(c->slot_of(10), -1);
  expect_map_consistent(*c);
  std::vector<uint32_t> ids = {3, 502, 3, 9};
  std::vector<uint8_t> out(ids.size() * kRowBytes);
  ASSERT_TRUE(c->gather(ids, out.data()).ok());
  expect_rows(ids, out);
  EXPECT_EQ(c->row_stats().warm_hits, 4u);
  EXPECT_EQ(c->row_stats().misses, 0u);
}

TEST_P(RowCacheTest, GatherReadsMissesOnceThenHits) {
  auto c = make(32);
  std::vector<uint32_t> ids = {7, 999, 7, 123, 999, 0};
  std::vector<uint8_t> out(ids.size() * kRowBytes);
  ASSERT_TRUE(c->gather(ids, out.data()).ok());
  expect_rows(ids, out);
  EXPECT_EQ(c->row_stats().misses, 4u);  // distinct ids
  EXPECT_EQ(c->row_stats().bytes_loaded, 4 * kRowBytes);
  std::fill(out.begin(), out.end(), 0);
  ASSERT_TRUE(c->gather(ids, out.data()).ok());
  expect_rows(ids, out);
  EXPECT_EQ(c->row_stats().hits, ids.size());
  EXPECT_EQ(c->row_stats().misses, 4u);
  expect_map_consistent(*c);
}

TEST_P(RowCacheTest, EvictionKeepsTheIdMapRight) {
  auto c = make(12);
  std::vector<RowRange> warm = {{100, 4}};
  ASSERT_TRUE(c->warm(warm).ok());
  std::mt19937 rng(4);
  for (int step = 0; step < 200; step++) {
    std::vector<uint32_t> ids(1 + rng() % 6);
    for (auto& id : ids) id = rng() % 40 + (rng() % 4 == 0 ? 100 : 0);
    std::vector<uint8_t> out(ids.size() * kRowBytes);
    ASSERT_TRUE(c->gather(ids, out.data()).ok());
    expect_rows(ids, out);
  }
  expect_map_consistent(*c);
  EXPECT_GT(c->row_stats().evictions, 0u);
  for (uint64_t id = 100; id < 104; id++) EXPECT_LT(c->slot_of(id), 4) << "warm rows are never evicted";
  int cached = 0;
  for (uint64_t id = 0; id < kRows; id++) cached += c->slot_of(id) >= 0;
  EXPECT_EQ(cached, 12);
}

TEST_P(RowCacheTest, BatchLargerThanTheCacheBypassesIt) {
  auto c = make(8);
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 40; i++) ids.push_back((i * 37) % kRows);
  ids.push_back(ids[30]);  // a repeat of a bypassed id
  std::vector<uint8_t> out(ids.size() * kRowBytes);
  ASSERT_TRUE(c->gather(ids, out.data()).ok());
  expect_rows(ids, out);
  EXPECT_EQ(c->row_stats().misses, 40u);
  EXPECT_EQ(c->row_stats().bypassed, 32u);
  expect_map_consistent(*c);
}

// As a tier: warm rows come as views, LRU rows pinned in place while their Pins live, misses read together; rows
// read ahead land without a wait and become hits; the tier's counters sum the warm hits in.
TEST_P(RowCacheTest, AsATierRowsArePinnedWhereTheyAreAndReadAhead) {
  auto c = make(10);
  ASSERT_TRUE(c);
  const RowRange warm[] = {{0, 4}};
  ASSERT_TRUE(c->warm(warm).ok());
  EXPECT_EQ(c->max_acquire(), 6u);
  EXPECT_FALSE(c->resident());
  {
    auto p = c->acquire(0, std::vector<int32_t>{2, 500, 501, 2});
    ASSERT_TRUE(p.ok()) << p.error().message;
    for (size_t i = 0; i < 4; i++) EXPECT_EQ(0, std::memcmp(p->data(i), row(std::vector<uint64_t>{2, 500, 501, 2}[i]), kRowBytes));
    EXPECT_TRUE(c->contains(0, 500));
  }
  c->prefetch(0, std::vector<int32_t>{600, 601, 2});  // row 2 is warm: not read again
  auto p = c->acquire(0, std::vector<int32_t>{601, 600});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(0, std::memcmp(p->data(0), row(601), kRowBytes));
  EXPECT_EQ(0, std::memcmp(p->data(1), row(600), kRowBytes));
  const TierStats st = c->stats();
  EXPECT_EQ(st.cache.prefetch_issued, 2u);
  EXPECT_EQ(st.cache.prefetch_used, 2u);
  EXPECT_EQ(c->row_stats().misses, 2u);  // 500 and 501; the repeated 2 and the read-ahead rows are hits
  EXPECT_GE(st.cache.hits, 2u);          // the warm row, twice
  expect_map_consistent(*c);
  // Out of the table: an error naming the id, nothing pinned.
  auto bad = c->acquire(0, std::vector<int32_t>{int32_t(kRows)});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("id 1000"), std::string::npos) << bad.error().message;
}

TEST_P(RowCacheTest, ErrorsNameTheIdOrRange) {
  auto c = make(16);
  std::vector<uint32_t> bad = {1, uint32_t(kRows)};
  std::vector<uint8_t> out(2 * kRowBytes);
  Status st = c->gather(bad, out.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("id 1000"), std::string::npos) << st.error().message;

  std::vector<RowRange> overlap = {{0, 5}, {4, 2}};
  st = c->warm(overlap);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("overlap"), std::string::npos) << st.error().message;
  std::vector<RowRange> too_many = {{0, 16}};
  EXPECT_FALSE(c->warm(too_many).ok());
  std::vector<RowRange> outside = {{990, 20}};
  EXPECT_FALSE(c->warm(outside).ok());

  std::vector<uint32_t> one = {3};
  ASSERT_TRUE(c->gather(one, out.data()).ok());
  std::vector<RowRange> late = {{0, 1}};
  EXPECT_FALSE(c->warm(late).ok());  // warm-up comes before the first gather
}

TEST_P(RowCacheTest, TableLargerThanTheFileIsRefused) {
  auto r = io::Reader::create({.backend = GetParam()});
  ASSERT_TRUE(r.ok());
  auto f = (*r)->open(path_);
  ASSERT_TRUE(f.ok());
  auto c = RowCache::create(std::move(r).value(),
                            {.file = *f, .table_offset = kTableOffset, .row_bytes = kRowBytes, .rows = kRows + 1, .slots = 8});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("table.bin"), std::string::npos) << c.error().message;
}

INSTANTIATE_TEST_SUITE_P(Backends, RowCacheTest, ::testing::Values(io::Backend::kUring, io::Backend::kPread),
                         [](const auto& info) { return std::string(io::backend_name(info.param)); });

}  // namespace
}  // namespace df::cache
