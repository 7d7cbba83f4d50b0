// A resumed ingest reads again the source bytes its last checkpoint covered: a file whose bytes changed under the
// same size and mtime, or one swapped on a server that sends neither ETag nor Last-Modified, starts over instead of
// ending in a store that mixes both files.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "diskformer/store/store.h"
#include "store/http_server.h"
#include "store/range_hash.h"
#include "store/store_test_util.h"

namespace df::store {
namespace {

namespace fs = std::filesystem;

struct Range {
  uint64_t from = 0, to = 0;
};

// Runs a slowed-down ingest of `source` into `dir` and kills it once a checkpoint covers some bytes; returns the
// range that checkpoint says it covers.
Range kill_after_a_checkpoint(const std::string& source, const fs::path& dir, const fs::path& scratch) {
  const pid_t pid = test::spawn_cli({"ingest", "-m", source, "--store", dir.string(), "--limit-rate", "1M",
                                     "--checkpoint-every", "64K"},
                                    (scratch / "k.out").string(), (scratch / "k.err").string());
  Range r;
  while (r.to <= r.from) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto j = nlohmann::json::parse(test::slurp(dir / kProgressFile), nullptr, false);
    if (j.is_object() && j.contains("verify"))
      r = {j["verify"]["from"].get<uint64_t>(), j["verify"]["to"].get<uint64_t>()};
    int status = 0;
    if (r.to <= r.from && ::waitpid(pid, &status, WNOHANG) == pid) {
      ADD_FAILURE() << "the ingest ended before its first checkpoint: " << test::slurp(scratch / "k.err");
      return r;
    }
  }
  ::kill(pid, SIGKILL);
  test::wait_child(pid);
  return r;
}

// Flips bytes all through [from, to) of the file, keeping its size and its mtime to the nanosecond.
void change_bytes_keeping_size_and_mtime(const fs::path& file, Range r) {
  const auto mtime = fs::last_write_time(file);
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  for (uint64_t at = r.from; at < r.to; at += 997) {
    f.seekg(static_cast<std::streamoff>(at));
    const char c = static_cast<char>(f.get() ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(c);
  }
  f.close();
  fs::last_write_time(file, mtime);
}

void expect_store_of(const fs::path& dir, const fs::path& file, const fs::path& scratch) {
  const fs::path clean = scratch / "clean";
  fs::remove_all(clean);
  auto r = test::run_cli({"ingest", "-m", file.string(), "--store", clean.string(), "--quiet"}, scratch);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(test::slurp(dir / kDataFile) == test::slurp(clean / kDataFile)) << "the store mixes two files";
}

TEST(ResumeCheck, LocalBytesChangedUnderTheSameSizeAndMtimeStartOver) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  const fs::path tmp = test::temp_dir("resume_local");
  const fs::path m = tmp / "m.gguf", dir = tmp / "store";
  test::copy_writable(model, m);

  // Unchanged: resumed, after reading the last checkpoint's bytes again.
  kill_after_a_checkpoint(m.string(), dir, tmp);
  auto same = test::run_cli({"ingest", "-m", m.string(), "--store", dir.string()}, tmp);
  ASSERT_EQ(same.code, 0) << same.err;
  EXPECT_NE(same.err.find("checkpointed read again: unchanged"), std::string::npos) << same.err;

  fs::remove_all(dir);
  const Range r = kill_after_a_checkpoint(m.string(), dir, tmp);
  change_bytes_keeping_size_and_mtime(m, r);
  auto changed = test::run_cli({"ingest", "-m", m.string(), "--store", dir.string()}, tmp);
  ASSERT_EQ(changed.code, 0) << changed.err;
  EXPECT_NE(changed.err.find("changed since the interrupted ingest: source bytes " + std::to_string(r.from) + ".." +
                             std::to_string(r.to)),
            std::string::npos)
      << changed.err;
  EXPECT_NE(changed.err.find("starting over"), std::string::npos) << changed.err;
  EXPECT_EQ(changed.err.find("resuming at"), std::string::npos) << changed.err;
  expect_store_of(dir, m, tmp);
}

TEST(ResumeCheck, FileSwappedOnAServerWithoutValidatorsStartsOver) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  const fs::path tmp = test::temp_dir("resume_http");
  const fs::path served = tmp / "m.gguf", dir = tmp / "store";
  test::copy_writable(model, served);
  test::BareHttp server(served);
  const Range r = kill_after_a_checkpoint(server.url(), dir, tmp);
  change_bytes_keeping_size_and_mtime(served, r);
  auto changed = test::run_cli({"ingest", "-m", server.url(), "--store", dir.string()}, tmp);
  ASSERT_EQ(changed.code, 0) << changed.err;
  EXPECT_NE(changed.err.find("changed since the interrupted ingest: source bytes"), std::string::npos) << changed.err;
  expect_store_of(dir, served, tmp);
}

TEST(ResumeCheck, HashIsTheSameHoweverTheBytesAreCut) {
  std::string bytes(100003, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + i / 251);
  detail::RangeHash whole;
  whole.update(bytes.data(), bytes.size());
  for (size_t cut : {1u, 5u, 31u, 32u, 33u, 4096u, 65537u}) {
    detail::RangeHash pieces;
    for (size_t at = 0; at < bytes.size(); at += cut)
      pieces.update(bytes.data() + at, std::min(cut, bytes.size() - at));
    EXPECT_EQ(pieces.digest(), whole.digest()) << "pieces of " << cut;
  }
  bytes[50000] ^= 1;
  detail::RangeHash flipped;
  flipped.update(bytes.data(), bytes.size());
  EXPECT_NE(flipped.digest(), whole.digest());
  EXPECT_NE(detail::RangeHash{}.digest(), whole.digest());
}

}  // namespace
}  // namespace df::store
