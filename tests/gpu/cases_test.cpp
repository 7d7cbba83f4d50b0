// The greedy cases of tests/data/cases on the CUDA backend, all resident: llama.cpp's CPU tokens (which the CPU
// engine gives exactly, tests/model/cases_test.cpp) wherever the backends' rounding cannot decide the choice. A case
// whose tokens differ passes only where the GPU parts from the CPU engine at a measured near-tie: the CPU's margin
// between the two tokens at that step is below the largest difference of the two backends' logits there.
#include <gtest/gtest.h>

#include "diskformer/tokenizer/tokenizer.h"
#include "gpu/gpu_support.h"
#include "support/cases.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

class LlamaCasesCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCasesCuda, GreedyMatchesLlamaCppOrPartsAtANearTie) {
  DF_REQUIRE_GPU();
  const nlohmann::json doc = read_case_file(GetParam());
  DF_REQUIRE_SHARED(shared, case_shared_file(doc));
  const std::string path = case_model_path(doc, GetParam(), shared);
  ASSERT_FALSE(path.empty());
  const uint32_t n_ctx = doc["n_ctx"];
  auto cpu = engine::Model::open(path, {.n_ctx = n_ctx, .threads = doc["threads"]});
  ASSERT_TRUE(cpu.ok()) << cpu.error().message;
  auto tok = tokenizer::Tokenizer::from_gguf((*cpu)->file());
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  std::vector<int32_t> eog;
  for (int64_t id = 0; id < (*cpu)->spec().n_vocab; ++id)
    if (tok->is_eog(int32_t(id))) eog.push_back(int32_t(id));
  auto gpu = open_gpu(path, n_ctx);
  ASSERT_NE(gpu, nullptr);
  auto s = session_of(*gpu);
  ASSERT_TRUE(s.has_value());
  for (const auto& c : doc["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = c["completion_ids"].get<std::vector<int32_t>>();
    s->truncate(0);
    const auto got = greedy_gpu(*s, prompt, c["n_predict"], eog);
    size_t same = 0;
    while (same < got.size() && same < want.size() && got[same] == want[same]) ++same;
    std::printf("[cases cuda] %-36s %4zu prompt tokens  common prefix %zu/%zu tokens\n", GetParam().c_str(),
                prompt.size(), same, want.size());
    if (got != want)
      expect_near_tie(**cpu, *s, prompt, got, GetParam() + ", " + std::to_string(prompt.size()) + "-token prompt", eog);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LlamaCasesCuda, ::testing::ValuesIn(case_files()), case_test_name);

}  // namespace
}  // namespace df::test
