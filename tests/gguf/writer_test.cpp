#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>

#include "diskformer/gguf/reader.h"
#include "diskformer/gguf/writer.h"
#include "support/test_paths.h"

namespace {

using df::gguf::GgmlType;
using df::gguf::Value;
using df::gguf::ValueType;

std::vector<uint8_t> read_range(const std::string& path, uint64_t offset, uint64_t n) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<uint8_t> out(n);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n));
  return out;
}

TEST(GgufWriter, RoundTripsEveryValueTypeAndTensorData) {
  auto dir = df::test::temp_dir("roundtrip");
  std::string path = (dir / "rt.gguf").string();
  std::vector<std::pair<std::string, Value>> kvs = {
      {"u8", Value::u8(200)},
      {"i8", {ValueType::I8, int64_t{-100}}},
      {"u16", {ValueType::U16, uint64_t{60000}}},
      {"i16", {ValueType::I16, int64_t{-30000}}},
      {"u32", Value::u32(4000000000u)},
      {"i32", Value::i32(-2000000000)},
      {"u64", Value::u64(1ull << 60)},
      {"i64", Value::i64(-(1ll << 60))},
      {"f32", Value::f32(1.5f)},
      {"f64", Value::f64(-2.25)},
      {"bool", Value::boolean(true)},
      {"str", Value::string("h\xc3\xa9llo\n")},
      {"strings", Value::array(ValueType::STRING, {Value::string("a"), Value::string(""), Value::string("ccc")})},
      {"nested", Value::array(ValueType::ARRAY, {Value::array(ValueType::I32, {Value::i32(1), Value::i32(-2)}),
                                                 Value::array(ValueType::F32, {})})},
  };
  std::mt19937 rng(7);
  std::vector<uint8_t> t1(64 * 3 * 4), t2(2 * 64 / 32 * 18), t3(10 * 2);
  for (auto* v : {&t1, &t2, &t3})
    for (auto& b : *v) b = static_cast<uint8_t>(rng());
  {
    auto w = df::gguf::Writer::create(path, {.alignment = 64});
    ASSERT_TRUE(w.ok()) << w.error().message;
    for (const auto& [k, v] : kvs) w->set(k, v);
    ASSERT_TRUE(w->add_tensor("t1", GgmlType::F32, {64, 3}).ok());
    ASSERT_TRUE(w->add_tensor("t2", GgmlType::Q4_0, {64, 2}).ok());
    ASSERT_TRUE(w->add_tensor("t3", GgmlType::F16, {10}).ok());
    ASSERT_TRUE(w->write_header().ok());
    // Data in uneven pieces that straddle tensor boundaries.
    std::vector<uint8_t> all(t1);
    all.insert(all.end(), t2.begin(), t2.end());
    all.insert(all.end(), t3.begin(), t3.end());
    for (size_t i = 0; i < all.size(); i += 37)
      ASSERT_TRUE(w->write_data(all.data() + i, std::min<size_t>(37, all.size() - i)).ok());
    EXPECT_FALSE(std::filesystem::exists(path)) << "the final name must appear only when complete";
    ASSERT_TRUE(w->finish().ok());
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  auto r = df::gguf::read_file(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->alignment, 64u);
  for (const auto& [k, v] : kvs) {
    const Value* got = r->find(k);
    ASSERT_NE(got, nullptr) << k;
    EXPECT_TRUE(*got == v) << k << ": " << got->summary() << " vs " << v.summary();
  }
  ASSERT_EQ(r->tensors.size(), 3u);
  EXPECT_EQ(read_range(path, r->tensor("t1")->offset, t1.size()), t1);
  EXPECT_EQ(read_range(path, r->tensor("t2")->offset, t2.size()), t2);
  EXPECT_EQ(read_range(path, r->tensor("t3")->offset, t3.size()), t3);
  for (const auto& t : r->tensors) EXPECT_EQ(t.offset % 64, 0u);
}

TEST(GgufWriter, RewritingASharedModelIsByteIdentical) {
  DF_REQUIRE_SHARED(src, "models/qwen3-q4_0.gguf");
  auto f = df::gguf::read_file(src.string());
  ASSERT_TRUE(f.ok());
  auto dir = df::test::temp_dir("rewrite");
  std::string path = (dir / "copy.gguf").string();
  auto w = df::gguf::Writer::create(path, {.alignment = f->alignment, .version = f->version});
  ASSERT_TRUE(w.ok());
  for (const auto& kv : f->metadata) w->set(kv.key, kv.value);
  for (const auto& t : f->tensors) ASSERT_TRUE(w->add_tensor(t.name, t.type, t.shape).ok());
  ASSERT_TRUE(w->write_header().ok());
  for (const auto& t : f->tensors) {
    auto data = read_range(src.string(), t.offset, t.n_bytes);
    ASSERT_TRUE(w->write_data(data.data(), data.size()).ok());
  }
  ASSERT_TRUE(w->finish().ok());
  std::ifstream a(src, std::ios::binary), b(path, std::ios::binary);
  std::vector<char> da((std::istreambuf_iterator<char>(a)), {}), db((std::istreambuf_iterator<char>(b)), {});
  EXPECT_EQ(da.size(), db.size());
  EXPECT_TRUE(da == db) << "the rewritten file differs from the original";
}

TEST(GgufWriter, IncompleteOrAbandonedWritesLeaveNoFile) {
  auto dir = df::test::temp_dir("incomplete");
  std::string path = (dir / "x.gguf").string();
  {
    auto w = df::gguf::Writer::create(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->add_tensor("t", GgmlType::F32, {16}).ok());
    ASSERT_TRUE(w->write_header().ok());
    uint8_t half[32] = {};
    ASSERT_TRUE(w->write_data(half, sizeof half).ok());
    auto st = w->finish();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("tensor 't' got 32 of 64 bytes"), std::string::npos) << st.error().message;
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
}

TEST(GgufWriter, RefusesBadTensors) {
  auto dir = df::test::temp_dir("bad");
  auto w = df::gguf::Writer::create((dir / "x.gguf").string());
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->add_tensor("q", GgmlType::Q4_0, {33}).ok());
  EXPECT_FALSE(w->add_tensor("z", GgmlType::F32, {4, 0}).ok());
  EXPECT_FALSE(w->add_tensor("", GgmlType::F32, {4}).ok());
  ASSERT_TRUE(w->add_tensor("t", GgmlType::F32, {4}).ok());
  EXPECT_FALSE(w->add_tensor("t", GgmlType::F32, {4}).ok());
}

TEST(GgufWriter, AFullDiskIsAClearErrorAndNoFile) {
  auto dir = df::test::temp_dir("full");
  std::string path = (dir / "big.gguf").string();
  // A child process with a 1 MiB file size limit stands in for a full disk (SIGXFSZ ignored, so write fails EFBIG).
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{1 << 20, 1 << 20};
    setrlimit(RLIMIT_FSIZE, &lim);
    // The writer lives inside the lambda so that its destructor runs before _exit.
    int code = [&] {
      auto w = df::gguf::Writer::create(path);
      if (!w.ok()) return 10;
      if (!w->add_tensor("t", GgmlType::F32, {1 << 20}).ok()) return 11;
      if (!w->write_header().ok()) return 12;
      std::vector<uint8_t> data(4 << 20, 1);
      auto st = w->write_data(data.data(), data.size());
      if (st.ok()) st = w->finish();
      if (st.ok()) return 13;
      return st.error().message.find("write failed at offset") != std::string::npos ? 0 : 14;
    }();
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
}

}  // namespace
