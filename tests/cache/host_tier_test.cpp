// The RAM tier over a real file: a resident tier reads every record at creation and never reads again; a cache tier
// reads misses on demand, evicts least recently used records, reads ahead what prefetch names without taking the
// slots an acquire needs, and pins records only while their Pins live.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "diskformer/cache/host_tier.h"
#include "support/test_paths.h"

namespace df::cache {
namespace {

// 6 layers of 10 records; record (l, i) is key l * 10 + i: 700 bytes at key * 1000 + 3, placed at slot offset 100.
constexpr uint32_t kLayers = 6, kPerLayer = 10;
constexpr uint64_t kRecord = 700, kSlotBytes = 800;

class HostTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bytes_.resize(kLayers * kPerLayer * 1000 + 4096);
    std::mt19937_64 rng(5);
    for (auto& b : bytes_) b = uint8_t(rng());
    path_ = (df::test::temp_dir("host_tier") / "records.bin").string();
    std::ofstream(path_, std::ios::binary).write(reinterpret_cast<const char*>(bytes_.data()), std::streamsize(bytes_.size()));
  }

  std::unique_ptr<HostTier> make(bool resident, uint32_t slots, uint32_t max_prefetch = 2) {
    auto r = io::Reader::create({});
    EXPECT_TRUE(r.ok());
    auto fid = (*r)->open(path_);
    EXPECT_TRUE(fid.ok());
    const io::FileId f = *fid;
    Locator locate = [f](Key k, std::vector<Extent>& out) {
      out.push_back({f, k * 1000 + 3, kRecord, 100});
      return Status{};
    };
    auto t = HostTier::create(std::move(r).value(), locate,
                              {.n_layers = kLayers, .n_index = kPerLayer, .slots = slots, .slot_bytes = kSlotBytes,
                               .resident = resident, .max_prefetch = max_prefetch});
    EXPECT_TRUE(t.ok()) << t.error().message;
    return t.ok() ? std::move(t).value() : nullptr;
  }

  bool holds(const Pins& p, size_t i, uint32_t layer, int32_t id) const {
    const uint64_t k = uint64_t(layer) * kPerLayer + uint32_t(id);
    return std::memcmp(p.data(i) + 100, bytes_.data() + k * 1000 + 3, kRecord) == 0;
  }

  std::vector<uint8_t> bytes_;
  std::string path_;
};

TEST_F(HostTierTest, ResidentReadsEverythingOnceAndNeverAgain) {
  auto t = make(/*resident=*/true, 0);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->resident());
  EXPECT_EQ(t->slots(), kLayers * kPerLayer);
  EXPECT_EQ(t->max_acquire(), t->slots());
  EXPECT_EQ(t->bytes_read_at_creation(), kLayers * kPerLayer * kRecord);
  for (uint32_t l = 0; l < kLayers; ++l) {
    const std::vector<int32_t> ids = {9, 0, 4};
    auto p = t->acquire(l, ids);
    ASSERT_TRUE(p.ok()) << p.error().message;
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_TRUE(holds(*p, i, l, ids[i]));
    EXPECT_TRUE(t->contains(l, 7));
  }
  const TierStats s = t->stats();
  EXPECT_EQ(s.cache.misses, 0u);
  EXPECT_EQ(s.cache.bytes_loaded, 0u);
  EXPECT_EQ(s.cache.hits, 3u * kLayers);
}

TEST_F(HostTierTest, CacheReadsMissesEvictsLruAndPinsWhileHeld) {
  auto t = make(/*resident=*/false, 6);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->resident());
  EXPECT_EQ(t->max_acquire(), 4u);  // two slots stay for reads ahead
  {
    auto p = t->acquire(2, std::vector<int32_t>{1, 2, 3, 4});
    ASSERT_TRUE(p.ok()) << p.error().message;
    for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(holds(*p, i, 2, int32_t(i + 1)));
    EXPECT_EQ(t->stats().cache.misses, 4u);
    // With those four pinned two slots are left: a third record finds every slot pinned.
    auto q = t->acquire(3, std::vector<int32_t>{0, 1});
    ASSERT_TRUE(q.ok());
    auto r = t->acquire(3, std::vector<int32_t>{5});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("pinned"), std::string::npos) << r.error().message;
  }
  // Unpinned in reverse order of acquiring (q before p): (3, 0) is now the least recently used and goes first.
  auto p = t->acquire(4, std::vector<int32_t>{0});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(t->contains(3, 0));
  EXPECT_TRUE(t->contains(3, 1));
  EXPECT_TRUE(t->contains(2, 4));
  auto again = t->acquire(2, std::vector<int32_t>{4});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(holds(*again, 0, 2, 4));
  EXPECT_EQ(t->stats().cache.hits, 1u);
}

TEST_F(HostTierTest, PrefetchReadsAheadAndBecomesHits) {
  auto t = make(/*resident=*/false, 8, /*max_prefetch=*/3);
  ASSERT_TRUE(t);
  t->prefetch(5, std::vector<int32_t>{7, 8, 9, 6});  // one more than may be in flight: dropped
  t->pool().wait_prefetches();
  EXPECT_TRUE(t->contains(5, 7) && t->contains(5, 8) && t->contains(5, 9));
  EXPECT_FALSE(t->contains(5, 6));
  auto p = t->acquire(5, std::vector<int32_t>{9, 7});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(holds(*p, 0, 5, 9));
  const TierStats s = t->stats();
  EXPECT_EQ(s.cache.prefetch_issued, 3u);
  EXPECT_EQ(s.cache.prefetch_used, 2u);
  EXPECT_EQ(s.cache.prefetch_dropped, 1u);
  EXPECT_EQ(s.cache.misses, 0u);
}

}  // namespace
}  // namespace df::cache
