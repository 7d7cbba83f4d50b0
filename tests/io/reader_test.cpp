// Reads through both backends against the bytes that were written, with random and edge-case ranges, caller buffers
// of every phase, errors, and the O_DIRECT refusal path.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <tuple>

#include <gtest/gtest.h>

#include "diskformer/io/reader.h"
#include "io/io_support.h"
#include "support/test_paths.h"

namespace df::io {
namespace {

std::vector<uint8_t> pattern_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

std::filesystem::path write_file(const std::filesystem::path& dir, const std::string& name,
                                 const std::vector<uint8_t>& bytes) {
  auto path = dir / name;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  return path;
}

std::vector<uint8_t> pread_bytes(const std::string& path, uint64_t offset, uint64_t length) {
  std::vector<uint8_t> v(length);
  int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::pread(fd, v.data(), length, off_t(offset)), ssize_t(length));
  ::close(fd);
  return v;
}

std::unique_ptr<Reader> make(Backend backend, Direct direct, unsigned qd = 16) {
  ReaderOptions o{.backend = backend, .direct = direct, .queue_depth = qd};
  auto r = Reader::create(o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(r).value() : nullptr;
}

// A file of 5 MiB + 1234 bytes: the tail block is partial.
constexpr size_t kFileBytes = (5u << 20) + 1234;

class ReaderTest : public ::testing::TestWithParam<std::tuple<Backend, Direct>> {
 protected:
  void SetUp() override {
    DF_REQUIRE_BACKEND(std::get<0>(GetParam()));
    bytes_ = pattern_bytes(kFileBytes, 42);
    auto dir = df::test::temp_dir("io");
    direct_fs_ = test::direct_supported(dir);
    path_ = write_file(dir, "data.bin", bytes_).string();
    reader_ = make(std::get<0>(GetParam()), std::get<1>(GetParam()));
    ASSERT_TRUE(reader_);
    ASSERT_EQ(reader_->backend(), std::get<0>(GetParam()));
    auto id = reader_->open(path_);
    ASSERT_TRUE(id.ok()) << id.error().message;
    file_ = *id;
  }

  std::vector<uint8_t> bytes_;
  std::string path_;
  std::unique_ptr<Reader> reader_;
  FileId file_ = 0;
  bool direct_fs_ = false;  // the temp directory's filesystem takes O_DIRECT
};

TEST_P(ReaderTest, OpensWithSizeAndDirectMode) {
  EXPECT_EQ(reader_->file(file_).size, kFileBytes);
  EXPECT_EQ(reader_->file(file_).direct, std::get<1>(GetParam()) != Direct::kOff && direct_fs_);
}

TEST_P(ReaderTest, RandomRangesMatchPread) {
  std::mt19937_64 rng(7);
  // Buffers of 4 KiB alignment plus a random phase, so that both the direct and the bounced paths are taken.
  constexpr int kN = 200;
  std::vector<AlignedBuffer> bufs;
  std::vector<ReadRequest> reqs;
  for (int i = 0; i < kN; i++) {
    uint64_t len = (i % 5 == 0) ? rng() % 8 + 1 : (i % 5 == 1 ? rng() % (600u << 10) : rng() % 20000);
    uint64_t off = rng() % (kFileBytes - len + 1);
    if (i % 7 == 0) off = align_down(off, kDirectAlignment);
    if (i % 11 == 0) len = std::min<uint64_t>(align_up(len, kDirectAlignment), kFileBytes - off);
    uint64_t phase = (i % 3 == 0) ? off % kDirectAlignment : rng() % kDirectAlignment;
    auto b = AlignedBuffer::allocate(len + phase + 1, kDirectAlignment);
    ASSERT_TRUE(b.ok());
    bufs.push_back(std::move(b).value());
    reqs.push_back({.file = file_, .offset = off, .length = len, .dst = bufs.back().data() + phase, .user_data = uint64_t(i)});
  }
  reader_->submit(reqs);
  std::vector<Completion> done;
  while (reader_->in_flight() > 0) reader_->poll(done, 1);
  ASSERT_EQ(done.size(), size_t(kN));
  std::vector<bool> seen(kN, false);
  for (const auto& c : done) {
    ASSERT_TRUE(c.status.ok()) << c.status.error().message;
    ASSERT_LT(c.user_data, uint64_t(kN));
    EXPECT_FALSE(seen[c.user_data]);
    seen[c.user_data] = true;
    const auto& r = reqs[c.user_data];
    auto want = pread_bytes(path_, r.offset, r.length);
    ASSERT_EQ(0, std::memcmp(r.dst, want.data(), r.length)) << "request " << c.user_data << " offset " << r.offset
                                                            << " length " << r.length;
    // The byte after the range is untouched (the buffer was zero-filled).
    EXPECT_EQ(static_cast<uint8_t*>(r.dst)[r.length], 0) << "request " << c.user_data;
  }
  const IoStats& s = reader_->stats();
  uint64_t total = 0;
  for (const auto& r : reqs) total += r.length;
  EXPECT_EQ(s.requests, uint64_t(kN));
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(s.bytes, total);
  EXPECT_GE(s.device_bytes, total);
  EXPECT_EQ(s.latency.count(), uint64_t(kN));
  EXPECT_GT(s.latency.max_ns(), 0u);
  EXPECT_LE(s.latency.percentile_ns(0.5), s.latency.percentile_ns(0.99));
  EXPECT_LE(s.latency.percentile_ns(0.99), s.latency.max_ns());
  if (reader_->file(file_).direct) {
    EXPECT_GT(s.bounced_bytes, 0u);
  } else {
    EXPECT_EQ(s.bounced_bytes, 0u);
  }
}

TEST_P(ReaderTest, EdgesOfTheFile) {
  struct Case {
    uint64_t offset, length;
  };
  const Case cases[] = {
      {0, kFileBytes},                  // everything, crossing the tail block
      {kFileBytes - 1, 1},              // the last byte
      {kFileBytes - 1234, 1234},        // exactly the partial tail block
      {kFileBytes - 5000, 5000},        // the last full block and the partial one
      {kFileBytes, 0},                  // empty, at the end
      {4096, 8192},                     // aligned everything
      {4095, 2},                        // straddles a block boundary
  };
  for (const auto& c : cases) {
    for (uint64_t phase : {uint64_t(0), c.offset % kDirectAlignment, uint64_t(13)}) {
      auto b = AlignedBuffer::allocate(c.length + phase + 1, kDirectAlignment);
      ASSERT_TRUE(b.ok());
      uint8_t* dst = b->data() + phase;
      Status st = reader_->read(file_, c.offset, c.length, dst);
      ASSERT_TRUE(st.ok()) << st.error().message;
      EXPECT_EQ(0, std::memcmp(dst, bytes_.data() + c.offset, c.length))
          << "offset " << c.offset << " length " << c.length << " phase " << phase;
    }
  }
}

TEST_P(ReaderTest, ReadsLargerThanOnePiece) {
  // 17 MiB + a few bytes, unaligned: crosses the reader's 16 MiB piece boundary and both edge blocks.
  std::vector<uint8_t> big = pattern_bytes((18u << 20) + 77, 9);
  auto path = write_file(df::test::temp_dir("big"), "big.bin", big);
  auto id = reader_->open(path.string());
  ASSERT_TRUE(id.ok());
  uint64_t off = 1000, len = (17u << 20) + 5;
  for (uint64_t phase : {off % kDirectAlignment, uint64_t(0)}) {
    auto b = AlignedBuffer::allocate(len + phase, kDirectAlignment);
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE(reader_->read(*id, off, len, b->data() + phase).ok());
    EXPECT_EQ(0, std::memcmp(b->data() + phase, big.data() + off, len)) << "phase " << phase;
  }
}

TEST_P(ReaderTest, QueueDepthSmallerThanTheBatch) {
  auto small = make(std::get<0>(GetParam()), std::get<1>(GetParam()), 2);
  auto id = small->open(path_);
  ASSERT_TRUE(id.ok());
  constexpr int kN = 64;
  std::vector<std::vector<uint8_t>> bufs(kN, std::vector<uint8_t>(3000));
  std::vector<ReadRequest> reqs;
  for (int i = 0; i < kN; i++)
    reqs.push_back({.file = *id, .offset = uint64_t(i) * 70001, .length = 3000, .dst = bufs[i].data(), .user_data = uint64_t(i)});
  small->submit(reqs);
  EXPECT_EQ(small->in_flight(), size_t(kN));
  std::vector<Completion> done;
  // wait_for larger than what is in flight returns once everything is done, without hanging.
  small->poll(done, 1000);
  EXPECT_EQ(done.size(), size_t(kN));
  EXPECT_EQ(small->in_flight(), 0u);
  for (int i = 0; i < kN; i++) EXPECT_EQ(0, std::memcmp(bufs[i].data(), bytes_.data() + i * 70001, 3000)) << i;
}

TEST_P(ReaderTest, PollWithoutWaitingCollectsEventually) {
  std::vector<uint8_t> buf(1 << 20);
  ReadRequest r{.file = file_, .offset = 12345, .length = buf.size(), .dst = buf.data(), .user_data = 99};
  reader_->submit({&r, 1});
  std::vector<Completion> done;
  // Bounded in time, not in spins: a loaded machine takes longer over the read. Whatever happens, the read is
  // collected before buf goes away.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done.empty() && std::chrono::steady_clock::now() < give_up) reader_->poll(done, 0);
  const bool collected_without_waiting = !done.empty();
  if (!collected_without_waiting) reader_->poll(done, 1);
  EXPECT_TRUE(collected_without_waiting);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].user_data, 99u);
  EXPECT_TRUE(done[0].status.ok());
  EXPECT_EQ(0, std::memcmp(buf.data(), bytes_.data() + 12345, buf.size()));
}

TEST_P(ReaderTest, BadRequestsCompleteWithErrors) {
  std::vector<uint8_t> buf(100);
  std::vector<ReadRequest> reqs = {
      {.file = file_, .offset = kFileBytes - 50, .length = 100, .dst = buf.data(), .user_data = 1},
      {.file = 77, .offset = 0, .length = 10, .dst = buf.data(), .user_data = 2},
      {.file = file_, .offset = 0, .length = 10, .dst = nullptr, .user_data = 3},
      {.file = file_, .offset = 10, .length = 10, .dst = buf.data(), .user_data = 4},
  };
  reader_->submit(reqs);
  std::vector<Completion> done;
  reader_->poll(done, 4);
  ASSERT_EQ(done.size(), 4u);
  for (const auto& c : done) {
    if (c.user_data == 4) {
      EXPECT_TRUE(c.status.ok());
      continue;
    }
    ASSERT_FALSE(c.status.ok()) << c.user_data;
    const std::string& m = c.status.error().message;
    if (c.user_data == 1) {
      EXPECT_NE(m.find(path_), std::string::npos) << m;
      EXPECT_NE(m.find("offset " + std::to_string(kFileBytes - 50)), std::string::npos) << m;
      EXPECT_NE(m.find("length 100"), std::string::npos) << m;
    }
    if (c.user_data == 2) {
      EXPECT_NE(m.find("77"), std::string::npos) << m;
    }
  }
  EXPECT_EQ(reader_->stats().failed, 3u);
  EXPECT_EQ(reader_->stats().requests, 4u);
  // read_batch reports the first error after all requests finished.
  Status st = reader_->read_batch(reqs);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(reader_->in_flight(), 0u);
}

TEST_P(ReaderTest, FileShrunkAfterOpenIsAnError) {
  auto path = write_file(df::test::temp_dir("shrink"), "s.bin", pattern_bytes(64 << 10, 3));
  auto id = reader_->open(path.string());
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(::truncate(path.c_str(), 10000), 0);
  std::vector<uint8_t> buf(20000);
  Status st = reader_->read(*id, 8192, 20000, buf.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("s.bin"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("ended early"), std::string::npos) << st.error().message;
}

INSTANTIATE_TEST_SUITE_P(Backends, ReaderTest,
                         ::testing::Combine(::testing::Values(Backend::kUring, Backend::kPread),
                                            ::testing::Values(Direct::kAuto, Direct::kOff)),
                         [](const auto& info) {
                           return std::string(backend_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) == Direct::kOff ? "_buffered" : "_direct");
                         });

// A filesystem that refuses O_DIRECT at open (tmpfs before Linux 6.6): kAuto reads through the page cache, kRequire
// fails naming the file.
int refuse_direct(const char* path, int flags) {
  if (flags & O_DIRECT) {
    errno = EINVAL;
    return -1;
  }
  return ::open(path, flags);
}

TEST(ReaderDirect, RefusedDirectFallsBackToBuffered) {
  auto bytes = pattern_bytes(100000, 5);
  auto path = write_file(df::test::temp_dir("refuse"), "r.bin", bytes).string();
  for (Backend b : {Backend::kUring, Backend::kPread}) {
    if (b == Backend::kUring && !test::uring_unavailable_reason().empty()) continue;
    auto r = Reader::create({.backend = b, .direct = Direct::kAuto, .open_file = refuse_direct});
    ASSERT_TRUE(r.ok());
    auto id = (*r)->open(path);
    ASSERT_TRUE(id.ok());
    EXPECT_FALSE((*r)->file(*id).direct);
    std::vector<uint8_t> buf(7777);
    ASSERT_TRUE((*r)->read(*id, 333, buf.size(), buf.data()).ok());
    EXPECT_EQ(0, std::memcmp(buf.data(), bytes.data() + 333, buf.size()));
    EXPECT_EQ((*r)->stats().bounced_bytes, 0u);

    auto strict = Reader::create({.backend = b, .direct = Direct::kRequire, .open_file = refuse_direct});
    ASSERT_TRUE(strict.ok());
    auto bad = (*strict)->open(path);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("O_DIRECT refused"), std::string::npos) << bad.error().message;
    EXPECT_NE(bad.error().message.find("r.bin"), std::string::npos) << bad.error().message;
  }
}

// A descriptor the kernel cannot read from (opened write-only) stands in for a failing device.
int unreadable_direct(const char* path, int flags) {
  if (flags & O_DIRECT) return ::open(path, O_WRONLY | O_CLOEXEC);
  return ::open(path, flags);
}

TEST(ReaderDirect, DeviceErrorsNameFileOffsetAndLength) {
  auto path = write_file(df::test::temp_dir("ebadf"), "e.bin", pattern_bytes(50000, 6)).string();
  for (Backend b : {Backend::kUring, Backend::kPread}) {
    if (b == Backend::kUring && !test::uring_unavailable_reason().empty()) continue;
    auto r = Reader::create({.backend = b, .direct = Direct::kAuto, .open_file = unreadable_direct});
    ASSERT_TRUE(r.ok());
    auto id = (*r)->open(path);
    ASSERT_TRUE(id.ok());
    auto buf = AlignedBuffer::allocate(8192);
    ASSERT_TRUE(buf.ok());
    Status st = (*r)->read(*id, 8192, 8192, buf->data());
    ASSERT_FALSE(st.ok()) << backend_name(b);
    EXPECT_NE(st.error().message.find("e.bin offset 8192 length 8192"), std::string::npos) << st.error().message;
    EXPECT_EQ((*r)->stats().failed, 1u);
  }
}

TEST(ReaderOpen, MissingFileNamesThePath) {
  auto r = Reader::create({.backend = Backend::kPread});
  ASSERT_TRUE(r.ok());
  auto id = (*r)->open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.error().message.find("/nonexistent/dir/model.gguf"), std::string::npos);
}

TEST(ReaderUring, RegisteredMemoryReadsTheSameBytes) {
  DF_REQUIRE_BACKEND(Backend::kUring);
  auto bytes = pattern_bytes(1 << 20, 8);
  auto path = write_file(df::test::temp_dir("reg"), "g.bin", bytes).string();
  auto r = Reader::create({.backend = Backend::kUring, .direct = Direct::kAuto});
  ASSERT_TRUE(r.ok());
  auto id = (*r)->open(path);
  ASSERT_TRUE(id.ok());
  auto arena = AlignedBuffer::allocate(1 << 20);
  ASSERT_TRUE(arena.ok());
  bool registered = (*r)->register_memory(arena->data(), arena->size());
  std::vector<ReadRequest> reqs;
  for (int i = 0; i < 16; i++)
    reqs.push_back({.file = *id, .offset = uint64_t(i) * 65536, .length = 65536, .dst = arena->data() + i * 65536});
  ASSERT_TRUE((*r)->read_batch(reqs).ok());
  EXPECT_EQ(0, std::memcmp(arena->data(), bytes.data(), bytes.size())) << "registered=" << registered;
  (*r)->unregister_memory();
}

TEST(ReaderAuto, PicksAConcreteBackend) {
  auto r = Reader::create({});
  ASSERT_TRUE(r.ok());
  EXPECT_NE((*r)->backend(), Backend::kAuto);
}

TEST(CoveringSpan, AlignsBothEnds) {
  AlignedSpan s = covering_span(5000, 10000);
  EXPECT_EQ(s.offset, 4096u);
  EXPECT_EQ(s.head, 904u);
  EXPECT_EQ(s.length, 12288u);  // [4096, 16384) covers [5000, 15000)
  AlignedSpan a = covering_span(8192, 4096);
  EXPECT_EQ(a.offset, 8192u);
  EXPECT_EQ(a.length, 4096u);
  EXPECT_EQ(a.head, 0u);
}

TEST(LatencyHistogram, PercentilesBracketTheSamples) {
  LatencyHistogram h;
  for (uint64_t v = 1; v <= 1000; v++) h.add(v * 1000);  // 1 us .. 1 ms
  EXPECT_EQ(h.count(), 1000u);
  EXPECT_EQ(h.max_ns(), 1'000'000u);
  EXPECT_EQ(h.sum_ns(), 500'500'000u);
  uint64_t p50 = h.percentile_ns(0.5), p99 = h.percentile_ns(0.99);
  EXPECT_GE(p50, 500'000u);
  EXPECT_LE(p50, 500'000u * 5 / 4);  // one bucket is a quarter of its power of two wide
  EXPECT_GE(p99, 990'000u);
  EXPECT_LE(p99, 1'000'000u);
  EXPECT_EQ(h.percentile_ns(1.0), 1'000'000u);
  for (uint64_t v : {0ull, 1ull, 3ull, 4ull, 7ull, 8ull, 1000ull, 123456789ull})
    EXPECT_GE(LatencyHistogram::bucket_upper(LatencyHistogram::bucket_of(v)), v) << v;
}

}  // namespace
}  // namespace df::io
