// Greedy completions against llama.cpp's CPU backend (../shared/models/*.gold.json): robust cases byte for byte,
// the others report their common prefix.
#include <gtest/gtest.h>

#include "model/gold.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

class Gold : public ::testing::TestWithParam<const char*> {};

TEST_P(Gold, GreedyMatchesLlamaCpp) {
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(model_path, "models/" + name + ".gguf");
  const auto cases = read_gold((shared_dir() / "models" / (name + ".gold.json")).string());
  auto model = engine::Model::open(model_path.string(), {.threads = 2});
  ASSERT_TRUE(model.ok()) << model.error().message;
  PieceDecoder pieces((*model)->file());
  for (const auto& c : cases) {
    engine::Session s(**model);
    const auto ids = greedy(s, c.prompt_ids, c.n_predict);
    std::string text;
    for (int32_t id : ids) text += pieces.piece(id);
    const size_t common = common_prefix(text, c.completion);
    std::printf("[gold] %-16s robust=%d common prefix %zu/%zu bytes  prompt \"%s\"\n", name.c_str(), c.robust,
                common, c.completion.size(), c.prompt.substr(0, 40).c_str());
    if (c.robust) EXPECT_EQ(text, c.completion) << name << " prompt: " << c.prompt;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Gold,
                         ::testing::Values("qwen3moe-q4_0", "qwen3moe-q8_0", "qwen3-q4_0", "llama-f16", "mixtral-q4_0"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace df::test
