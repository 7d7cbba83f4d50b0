// The GPU row cache over a RAM row cache over a file: every batch's rows, gathered by the kernel through the device
// id map, equal the file's rows while rows are evicted and copied again; the device map equals the host's mirror;
// bad batches are refused before anything changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>

#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/cache/cuda/device_rows.h"
#include "diskformer/cudart/buffer.h"
#include "gpu/gpu_support.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

constexpr uint64_t kRows = 1000, kCols = 26, kRowBytes = kCols * 4;  // neither a page nor a power of two

class GpuRowCache : public ::testing::Test {
 protected:
  void SetUp() override {
    DF_REQUIRE_GPU();
    table_.resize(kRows * kCols);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& v : table_) v = u(rng);
    path_ = (temp_dir("gpu_rows") / "table.bin").string();
    std::ofstream(path_, std::ios::binary)
        .write(reinterpret_cast<const char*>(table_.data()), std::streamsize(table_.size() * 4));
    auto r = io::Reader::create({});
    ASSERT_TRUE(r.ok()) << r.error().message;
    auto f = (*r)->open(path_);
    ASSERT_TRUE(f.ok()) << f.error().message;
    auto c = cache::RowCache::create(std::move(r).value(),
                                     {.file = *f, .row_bytes = kRowBytes, .rows = kRows, .slots = 150});
    ASSERT_TRUE(c.ok()) << c.error().message;
    host_ = std::move(c).value();
    ASSERT_TRUE(host_->warm({}).ok());
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  // The rows of ids as the kernel gathers them through the cache's map.
  std::vector<float> gather(const cache::DeviceRowCache& c, const std::vector<int32_t>& ids) {
    cuda::DeviceBuffer d_ids = cuda::to_device(ids);
    cuda::DeviceBuffer out(ids.size() * kRowBytes);
    const model::Mat slots{.type = gguf::GgmlType::F32, .data = c.slot_data(), .cols = int64_t(kCols),
                           .rows = int64_t(c.slots()), .row_bytes = kRowBytes};
    cuda::get_rows({.table = slots, .ids = d_ids.as<int32_t>(), .slot_of = c.slot_map(), .n_ids = int64_t(kRows),
                    .n = int64_t(ids.size()), .out = out.as<float>(), .stream = stream_});
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    return cuda::to_host(out.as<float>(), ids.size() * kCols);
  }

  std::vector<float> table_;
  std::string path_;
  std::unique_ptr<cache::RowCache> host_;
  cudaStream_t stream_ = nullptr;
};

TEST_F(GpuRowCache, BatchesGatherTheirRowsWhileRowsAreEvicted) {
  auto c = cache::DeviceRowCache::create(*host_, {.slots = 120, .max_batch = 32, .warm = {{0, 40}},
                                                  .consumer = stream_});
  ASSERT_TRUE(c.ok()) << c.error().message;
  cache::DeviceRowCache& rows = **c;
  EXPECT_EQ(rows.warm_slots(), 40u);
  EXPECT_EQ(rows.slot_of(7), 7);
  rows.reset_stats();
  std::mt19937 rng(9);
  uint64_t asked = 0;
  for (int step = 0; step < 300; ++step) {
    // Skewed ids with repeats inside a batch: low ids often, the rest of the table now and then.
    std::vector<int32_t> ids(1 + rng() % 32);
    for (int32_t& id : ids) id = rng() % 4 == 0 ? int32_t(rng() % kRows) : int32_t(rng() % 200);
    asked += ids.size();
    ASSERT_TRUE(rows.prepare(ids).ok());
    const std::vector<float> got = gather(rows, ids);
    for (size_t i = 0; i < ids.size(); ++i)
      ASSERT_EQ(0, std::memcmp(got.data() + i * kCols, table_.data() + uint64_t(ids[i]) * kCols, kRowBytes))
          << "step " << step << " position " << i << " id " << ids[i];
  }
  const cache::TierStats s = rows.stats();
  EXPECT_EQ(s.cache.lookups(), asked);
  EXPECT_GT(s.cache.misses, 0u);
  EXPECT_GT(s.cache.evictions, 0u);
  EXPECT_GT(s.cache.hits, 0u);
  EXPECT_EQ(s.cache.bytes_loaded, s.cache.misses * kRowBytes);
  // The device's map is the host's mirror.
  std::vector<int32_t> map(kRows);
  ASSERT_EQ(cudaMemcpy(map.data(), rows.slot_map(), kRows * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (uint64_t id = 0; id < kRows; ++id) ASSERT_EQ(map[id], rows.slot_of(id)) << "id " << id;
}

TEST_F(GpuRowCache, RefusesBadBatchesAndSizes) {
  auto small = cache::DeviceRowCache::create(*host_, {.slots = 50, .max_batch = 32, .warm = {{0, 40}},
                                                      .consumer = stream_});
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.error().message.find("50 slots cannot hold 40 warm rows and a batch of 32"), std::string::npos)
      << small.error().message;
  auto c = cache::DeviceRowCache::create(*host_, {.slots = 64, .max_batch = 32, .consumer = stream_});
  ASSERT_TRUE(c.ok()) << c.error().message;
  const std::vector<int32_t> outside = {3, int32_t(kRows)};
  Status st = (*c)->prepare(outside);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("id 1000 at batch position 1"), std::string::npos) << st.error().message;
  EXPECT_EQ((*c)->slot_of(3), -1) << "nothing changed";
  const std::vector<int32_t> many(33, 1);
  EXPECT_FALSE((*c)->prepare(many).ok());
  const std::vector<int32_t> fine = {3, 3, 999};
  ASSERT_TRUE((*c)->prepare(fine).ok());
  const std::vector<float> got = gather(**c, fine);
  EXPECT_EQ(0, std::memcmp(got.data() + 2 * kCols, table_.data() + 999 * kCols, kRowBytes));
}

}  // namespace
}  // namespace df::test
