// The commands on a split model (../shared/models/split: qwen3-q4_0 in three parts): inspect lists the parts and
// each tensor's part; run from the first part prints what the single file prints, resident and streamed; a later
// part, or a first part whose others are gone, is refused with the file to give.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "diskformer/engine/model.h"
#include "support/cli_run.h"

namespace df::test {
namespace {

namespace fs = std::filesystem;

TEST(Cli, SplitModelsRunAndInspectFromTheirFirstPart) {
  DF_REQUIRE_SHARED(first, "models/split/qwen3-q4_0-00001-of-00003.gguf");
  DF_REQUIRE_SHARED(single, "models/qwen3-q4_0.gguf");
  const CliRun inspect = run_cli_capture("inspect -m " + first.string());
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("split model: 3 parts"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("part 3: " + (first.parent_path() / "qwen3-q4_0-00003-of-00003.gguf").string() +
                             ", 1.14 MiB, 15 tensors"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("47 tensors"), std::string::npos) << inspect.out;

  const std::string gen = " -p 'It was the best of times' -n 24 --temp 0 -t 1 -c 256 --quiet";
  const CliRun want = run_cli_capture("run -m " + single.string() + gen);
  ASSERT_EQ(want.status, 0) << want.err;
  // The smallest budget at that context: the layers stream through 2 slots.
  auto probe = engine::Model::open(first.string(), {.n_ctx = 256, .threads = 1, .ram_budget = uint64_t(1) << 30});
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  const std::string least = " --ram-budget " + std::to_string((*probe)->plan().min_budget());
  for (const std::string& budget : {std::string(), least}) {
    const CliRun got = run_cli_capture("run -m " + first.string() + gen + budget);
    ASSERT_EQ(got.status, 0) << got.err;
    EXPECT_EQ(got.out, want.out) << budget;
  }

  const fs::path second = first.parent_path() / "qwen3-q4_0-00002-of-00003.gguf";
  const CliRun later = run_cli_capture("run -m " + second.string() + gen);
  EXPECT_EQ(later.status, 1);
  EXPECT_NE(later.err.find("part 2 of 3 of a split model (split.no = 1); open its first part, " + first.string()),
            std::string::npos) << later.err;

  const auto dir = temp_dir("split_alone");
  fs::copy_file(first, dir / first.filename());
  const CliRun alone = run_cli_capture("inspect -m " + (dir / first.filename()).string());
  EXPECT_EQ(alone.status, 1);
  EXPECT_NE(alone.err.find("part 2 of 3 of the split model: " + (dir / "qwen3-q4_0-00002-of-00003.gguf").string() +
                           ": cannot open"), std::string::npos) << alone.err;
}

}  // namespace
}  // namespace df::test
