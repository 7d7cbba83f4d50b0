// Nothing inside a store is followed: a symbolic link planted as one of its files is refused by name and its target
// left as it was; a planted temporary file or a hard link is replaced, never written through.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "diskformer/store/store.h"
#include "store/store_test_util.h"

namespace df::store {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

constexpr const char* kVictimText = "the user's own file\n";

fs::path make_victim(const fs::path& tmp) {
  const fs::path victim = tmp / "victim.txt";
  std::ofstream(victim) << kVictimText;
  return victim;
}

TEST(StoreLinks, LinkPlantedAsAStoreFileIsRefusedAndItsTargetKept) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  const fs::path tmp = test::temp_dir("links");
  const fs::path victim = make_victim(tmp);
  for (const char* name : {kDataFile, kHeaderFile, kManifestFile, kProgressFile, kLockFile}) {
    const fs::path dir = tmp / (std::string("store-") + name);
    fs::create_directories(dir);
    fs::create_symlink(victim, dir / name);
    auto r = run_cli({"ingest", "-m", model.string(), "--store", dir.string(), "--force"}, tmp);
    EXPECT_EQ(r.code, 1) << name << ": " << r.err;
    EXPECT_NE(r.err.find((dir / name).string() + ": is a symbolic link"), std::string::npos) << r.err;
    EXPECT_EQ(test::slurp(victim), kVictimText) << "written through " << name;
  }
}

TEST(StoreLinks, CompleteStoreWithALinkIsNotOpened) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  const fs::path tmp = test::temp_dir("links_open");
  const fs::path victim = make_victim(tmp), dir = tmp / "store";
  ASSERT_EQ(run_cli({"ingest", "-m", model.string(), "--store", dir.string(), "--quiet"}, tmp).code, 0);
  ASSERT_TRUE(Store::open(dir.string()).ok());
  const fs::path copy = tmp / "data.copy";
  fs::rename(dir / kDataFile, copy);
  fs::create_symlink(copy, dir / kDataFile);
  auto s = Store::open(dir.string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find((dir / kDataFile).string() + ": is a symbolic link"), std::string::npos)
      << s.error().message;
  auto again = run_cli({"ingest", "-m", model.string(), "--store", dir.string()}, tmp);
  EXPECT_EQ(again.code, 1) << again.err;
  EXPECT_NE(again.err.find("is a symbolic link"), std::string::npos) << again.err;
}

TEST(StoreLinks, PlantedTemporaryAndHardLinkAreReplacedNotWrittenThrough) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  const fs::path tmp = test::temp_dir("links_tmp");
  const fs::path victim = make_victim(tmp), dir = tmp / "store";
  fs::create_directories(dir);
  // The temporaries the durable writes rename into place, and a second name for the victim's bytes as data.bin.
  for (const char* name : {kManifestFile, kHeaderFile, kProgressFile})
    fs::create_symlink(victim, dir / (std::string(name) + ".tmp"));
  fs::create_hard_link(victim, dir / kDataFile);
  auto r = run_cli({"ingest", "-m", model.string(), "--store", dir.string(), "--quiet", "--force"}, tmp);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(test::slurp(victim), kVictimText);
  EXPECT_EQ(fs::hard_link_count(victim), 1u);
  EXPECT_TRUE(Store::open(dir.string(), {.source = model.string()}).ok());
}

}  // namespace
}  // namespace df::store
