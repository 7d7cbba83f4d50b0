// Greedy completions against llama.cpp's CPU backend beyond the shared gold files: tests/data/cases/*.json, each a
// model (one `synth` writes here from its seed, or a shared file) with prompts of up to 1,500 tokens and llama.cpp's
// 64 tokens after each (its batched prefill in ubatches of 512, then decode on 2 threads; how the reference was
// made is in the file). Every case must give llama.cpp's tokens exactly on the CPU, and the prompt must tokenize as
// llama.cpp tokenized it. (`stable`: llama.cpp's one-token prefill gives the same tokens; measured on prompts of up
// to 250 tokens, null on longer ones.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "diskformer/engine/session.h"
#include "diskformer/tokenizer/tokenizer.h"
#include "model/gold.h"
#include "support/cases.h"
#include "support/sessions.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

// The prompt, then n greedy tokens with every end-of-generation token banned (llama.cpp's --ignore-eos).
std::vector<int32_t> greedy_ignore_eos(engine::Session& s, const tokenizer::Tokenizer& tok,
                                       const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  Status st = s.eval(prompt);
  for (int i = 0; i < n && st.ok(); ++i) {
    std::vector<float> logits(s.logits().begin(), s.logits().end());
    for (size_t id = 0; id < logits.size(); ++id)
      if (tok.is_eog(int32_t(id))) logits[id] = -INFINITY;
    const int32_t id = sampling::argmax(logits);
    out.push_back(id);
    if (i + 1 < n) st = s.eval(std::span<const int32_t>(&id, 1));
  }
  if (!st.ok()) ADD_FAILURE() << st.error().message;
  return out;
}

class LlamaCases : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCases, GreedyMatchesLlamaCpp) {
  const nlohmann::json doc = read_case_file(GetParam());
  DF_REQUIRE_SHARED(shared, case_shared_file(doc));
  const std::string model_path = case_model_path(doc, GetParam(), shared);
  ASSERT_FALSE(model_path.empty());
  // llama.cpp's thread count: its decode over 512 cells or more splits them into one chunk per thread.
  auto model = engine::Model::open(model_path, {.n_ctx = doc["n_ctx"].get<uint32_t>(), .threads = doc["threads"]});
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto tok = tokenizer::Tokenizer::from_gguf((*model)->file());
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  PieceDecoder pieces((*model)->file());
  for (const auto& c : doc["cases"]) {
    const auto prompt_ids = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = c["completion_ids"].get<std::vector<int32_t>>();
    const std::string prompt = c["prompt"];
    EXPECT_EQ(tok->encode(prompt, {.parse_special = true}), prompt_ids)
        << GetParam() << ": tokenization of \"" << prompt.substr(0, 40) << "...\"";
    engine::Session s = new_session(**model);
    const auto got = greedy_ignore_eos(s, *tok, prompt_ids, c["n_predict"]);
    size_t same = 0;
    while (same < got.size() && same < want.size() && got[same] == want[same]) ++same;
    const char* stable = c["stable"].is_null() ? "?" : c["stable"].get<bool>() ? "yes" : "no";
    std::printf("[cases] %-36s %4zu prompt tokens  stable %-3s  common prefix %zu/%zu tokens\n", GetParam().c_str(),
                prompt_ids.size(), stable, same, want.size());
    EXPECT_EQ(got, want) << GetParam() << ", " << prompt_ids.size() << "-token prompt \"" << prompt.substr(0, 40)
                         << "...\": first difference at token " << same;
    std::string text;
    for (int32_t id : got) text += pieces.piece(id);
    EXPECT_EQ(text, base64_decode(c["completion_b64"])) << GetParam() << ": the printed bytes";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LlamaCases, ::testing::ValuesIn(case_files()), case_test_name);

}  // namespace
}  // namespace df::test
