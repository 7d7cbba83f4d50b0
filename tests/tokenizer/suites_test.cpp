// llama.cpp's tokenizer test suites (../shared/vocab) and the prompt ids of the gold files (../shared/models).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "diskformer/tokenizer/tokenizer.h"
#include "diskformer/util/check.h"
#include "support/test_paths.h"

namespace df::tokenizer {
namespace {

using test::slurp;

struct Suite {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
};

// .inp: cases separated by "\n__ggml_vocab_test__\n" (the file ends with one); .out: one line of ids per case.
Suite read_suite(const std::filesystem::path& inp, const std::filesystem::path& out) {
  Suite s;
  const std::string text = slurp(inp);
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = text.find(sep, pos);
    if (next == std::string::npos) next = text.size();
    s.texts.push_back(text.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream lines(slurp(out));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ids(line);
    std::vector<int32_t> v;
    int32_t id;
    while (ids >> id) v.push_back(id);
    s.ids.push_back(std::move(v));
  }
  return s;
}

// One load per vocabulary for the whole executable.
const Tokenizer& load(const std::filesystem::path& path) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[path.string()];
  if (!slot) {
    auto t = Tokenizer::from_file(path.string());
    if (!t.ok()) ADD_FAILURE() << t.error().message;
    DF_CHECK(t.ok());
    slot = std::make_unique<Tokenizer>(std::move(t).value());
  }
  return *slot;
}

std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t id : v) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

struct SuiteCase {
  const char* name;   // ggml-vocab-NAME.gguf.inp
  const char* vocab;  // the GGUF holding that vocabulary, under shared/
  bool spm;
};

constexpr SuiteCase kSuites[] = {
    {"llama-spm", "vocab/ggml-vocab-llama-spm.gguf", true},
    {"phi-3", "vocab/ggml-vocab-phi-3.gguf", true},
    {"gpt-2", "vocab/ggml-vocab-gpt-2.gguf", false},
    {"falcon", "vocab/ggml-vocab-falcon.gguf", false},
    {"deepseek-coder", "vocab/ggml-vocab-deepseek-coder.gguf", false},
    {"qwen2", "models/qwen3moe-q4_0.gguf", false},
    {"gemma4", "vocab/ggml-vocab-gemma4.gguf", false},
    {"qwen35", "vocab/ggml-vocab-qwen35.gguf", false},
};

class VocabSuite : public ::testing::TestWithParam<SuiteCase> {};

TEST_P(VocabSuite, MatchesLlamaCpp) {
  const SuiteCase& c = GetParam();
  const std::string base = std::string("vocab/ggml-vocab-") + c.name + ".gguf";
  DF_REQUIRE_SHARED(inp, base + ".inp");
  DF_REQUIRE_SHARED(out, base + ".out");
  DF_REQUIRE_SHARED(model, c.vocab);
  const Suite s = read_suite(inp, out);
  ASSERT_EQ(s.texts.size(), s.ids.size());
  ASSERT_GT(s.texts.size(), 40u);
  const Tokenizer& tok = load(model);
  int failures = 0;
  for (size_t i = 0; i < s.texts.size(); ++i) {
    const auto got = tok.encode(s.texts[i], {.add_bos = false});
    EXPECT_EQ(show(got), show(s.ids[i])) << "case " << i << ": '" << s.texts[i] << "'";
    failures += got != s.ids[i];
  }
  EXPECT_EQ(failures, 0);
}

// The suites' texts come back from their ids: byte-level BPE is lossless for valid UTF-8, gemma4's BPE too (its
// U+2581 print as spaces, characters without a token as their <0xXX> bytes), and SentencePiece loses only the
// space prefix it adds (which detokenization strips from the first piece).
TEST_P(VocabSuite, RoundTrips) {
  const SuiteCase& c = GetParam();
  const std::string base = std::string("vocab/ggml-vocab-") + c.name + ".gguf";
  DF_REQUIRE_SHARED(inp, base + ".inp");
  DF_REQUIRE_SHARED(model, c.vocab);
  const Suite s = read_suite(inp, std::filesystem::path(inp).replace_extension(".out"));
  const Tokenizer& tok = load(model);
  for (size_t i = 0; i < s.texts.size(); ++i) {
    const auto ids = tok.encode(s.texts[i], {.add_bos = false});
    EXPECT_EQ(tok.decode(ids, {.clean_spaces = false}), s.texts[i]) << "case " << i;
    // With BOS first, llama.cpp keeps the space of the first piece; stripping is asked for by removing BOS.
    auto with_bos = tok.encode(s.texts[i], {.add_bos = true});
    if (tok.bos() != kNoToken) {
      ASSERT_EQ(with_bos.front(), tok.bos());
      std::string expect = (c.spm && !s.texts[i].empty() ? " " : "") + s.texts[i];
      EXPECT_EQ(tok.decode(with_bos, {.clean_spaces = false}), expect) << "case " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, VocabSuite, ::testing::ValuesIn(kSuites),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

class GoldPrompts : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldPrompts, PromptIdsMatch) {
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(model, "models/" + name + ".gguf");
  DF_REQUIRE_SHARED(gold, "models/" + name + ".gold.json");
  const auto j = nlohmann::json::parse(slurp(gold));
  const Tokenizer& tok = load(model);
  ASSERT_FALSE(j["cases"].empty());
  for (const auto& c : j["cases"]) {
    const std::string prompt = c["prompt"];
    const auto expect = c["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(show(tok.encode(prompt)), show(expect)) << prompt;
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, GoldPrompts,
                         ::testing::Values("qwen3moe-q4_0", "qwen3moe-q8_0", "qwen3-q4_0", "llama-f16",
                                           "mixtral-q4_0", "qwen3moe-q4_k_m", "qwen3moe-q3_k_m", "qwen3moe-iq4_xs",
                                           "qwen3-q6_k", "qwen3-q2_k", "mixtral-q5_k_m", "gemma4-moe-q8_0",
                                           "gemma4-e2b-q8_0", "qwen35moe-q8_0"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace df::tokenizer
