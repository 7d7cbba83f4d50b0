// Training text to ids: documents split at blank lines, each tokenized like a prompt (BOS, leading space).
#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "diskformer/convert/corpus.h"
#include "support/test_paths.h"

namespace df::convert {
namespace {

TEST(Corpus, SplitsAtBlankLines) {
  auto docs = split_documents("\n\nIn the beginning\nAnd God said\n\n\nThe second\n\nlast");
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0], "In the beginning\nAnd God said");
  EXPECT_EQ(docs[1], "The second");
  EXPECT_EQ(docs[2], "last");
  EXPECT_TRUE(split_documents("\n\n\n").empty());
}

TEST(Corpus, EachDocumentTokenizedLikeAPrompt) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  auto tok = tokenizer::Tokenizer::from_file(vocab.string());
  ASSERT_TRUE(tok.ok());
  const auto dir = df::test::temp_dir("corpus");
  std::ofstream(dir / "text.txt") << "In the beginning\nAnd God said\n\nThe second one\n";
  auto stats = tokenize_corpus(*tok, (dir / "text.txt").string(), (dir / "ids.bin").string());
  ASSERT_TRUE(stats.ok()) << stats.error().message;
  std::vector<int32_t> want = tok->encode("In the beginning\nAnd God said");
  const std::vector<int32_t> second = tok->encode("The second one");
  want.insert(want.end(), second.begin(), second.end());
  EXPECT_EQ(stats->documents, 2u);
  ASSERT_EQ(stats->tokens, want.size());
  std::ifstream in(dir / "ids.bin", std::ios::binary);
  std::vector<uint16_t> got(want.size() + 1);
  in.read(reinterpret_cast<char*>(got.data()), std::streamsize(got.size() * 2));
  ASSERT_EQ(size_t(in.gcount()), want.size() * 2);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
  EXPECT_EQ(got[0], tok->bos());
  EXPECT_FALSE(tokenize_corpus(*tok, (dir / "missing.txt").string(), (dir / "x.bin").string()).ok());
}

}  // namespace
}  // namespace df::convert
