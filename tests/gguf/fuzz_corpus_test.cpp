// Replays the fuzzer's seed corpus and every input that ever crashed the parser (fuzz/crashes): each must parse
// or fail with an error, never crash, and what parses must keep its tensors inside the input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "diskformer/gguf/reader.h"
#include "support/test_paths.h"

namespace {

void replay(const std::filesystem::path& file, bool must_parse) {
  std::ifstream in(file, std::ios::binary);
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), {});
  auto src = df::gguf::memory_source(data.data(), data.size());
  auto r = df::gguf::parse(*src, file.filename().string());
  if (must_parse) {
    ASSERT_TRUE(r.ok()) << r.error().message;
  }
  if (!r.ok()) {
    EXPECT_NE(r.error().message.find(file.filename().string()), std::string::npos) << r.error().message;
    return;
  }
  for (const auto& t : r->tensors) EXPECT_LE(t.offset + t.n_bytes, data.size()) << file << " " << t.name;
}

TEST(FuzzCorpus, SeedsParse) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(df::test::source_dir() / "fuzz/corpus")) {
    SCOPED_TRACE(e.path().string());
    replay(e.path(), true);
    ++n;
  }
  EXPECT_GE(n, 4);
}

TEST(FuzzCorpus, EarlierCrashesStayFixed) {
  auto dir = df::test::source_dir() / "fuzz/crashes";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no fuzz/crashes";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename() == "README.md") continue;
    SCOPED_TRACE(e.path().string());
    replay(e.path(), false);
  }
}

}  // namespace
