// The pre-tokenizer regexes: every list llama.cpp knows compiles under PCRE2, and the splits follow its rules.
#include <gtest/gtest.h>

#include "tokenizer/pretokenizer.h"

namespace df::tokenizer {
namespace {

std::vector<std::string> split(PreType t, std::string_view text) {
  auto pre = PreTokenizer::create(t);
  EXPECT_TRUE(pre.ok()) << (pre.ok() ? "" : pre.error().message);
  return pre.ok() ? pre->split(text) : std::vector<std::string>{};
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, EveryKindCompiles) {
  for (int k = static_cast<int>(PreType::Default); k <= static_cast<int>(PreType::Whitespace); ++k) {
    auto pre = PreTokenizer::create(static_cast<PreType>(k));
    ASSERT_TRUE(pre.ok()) << pre_type_name(static_cast<PreType>(k)) << ": " << pre.error().message;
    EXPECT_FALSE(pre->patterns().empty());
    // Text of every kind of character splits into pieces that put the text back together.
    const std::string text = "Hello  wörld's 12345\r\n\t 你好 ½ 🦙.cpp ?!";
    std::string joined;
    for (const auto& w : pre->split(text)) joined += w;
    EXPECT_EQ(joined, text) << pre_type_name(static_cast<PreType>(k));
  }
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split(PreType::Llama3, "Hello world  123456 I'M"),
            (Words{"Hello", " world", " ", " ", "123", "456", " I", "'M"}));
  EXPECT_EQ(split(PreType::Llama3, "a  \n\n b"), (Words{"a", "  \n\n", " b"}));
}

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split(PreType::Gpt2, "Hello world's  test\n"), (Words{"Hello", " world", "'s", " ", " test", "\n"}));
  EXPECT_EQ(split(PreType::Gpt2, "I'M"), (Words{"I", "'", "M"}));  // gpt-2's contractions are lower case only
}

TEST(PreTokenizer, Qwen2SplitsDigits) {
  EXPECT_EQ(split(PreType::Qwen2, "x12345"), (Words{"x", "1", "2", "3", "4", "5"}));
}

TEST(PreTokenizer, Qwen35LettersTakeTheirMarks) {
  // U+0301 and U+0308 are combining marks: qwen35's letter runs hold them, qwen2's leave them to the next
  // letter run or to a punctuation run.
  EXPECT_EQ(split(PreType::Qwen35, "cafe\xcc\x81s 1\xcc\x81 x\xcc\x88!"),
            (Words{"cafe\xcc\x81s", " ", "1", "\xcc\x81", " x\xcc\x88", "!"}));
  EXPECT_EQ(split(PreType::Qwen2, "cafe\xcc\x81s 1\xcc\x81 x\xcc\x88!"),
            (Words{"cafe", "\xcc\x81s", " ", "1", "\xcc\x81", " x", "\xcc\x88!"}));
}

TEST(PreTokenizer, Gemma4SplitsLinesOnly) {
  EXPECT_EQ(split(PreType::Gemma4, "a b\n\n c\r\nd"), (Words{"a b", "\n\n", " c\r", "\n", "d"}));
}

TEST(PreTokenizer, EmptyMatchesSplit) {
  // superbpe's lookahead-only pattern matches empty strings; each one is a cut.
  EXPECT_EQ(split(PreType::SuperBpe, "1234567"), (Words{"1", "234", "567"}));
}

TEST(PreTokenizer, AfmoeDigitGroups) {
  EXPECT_EQ(split(PreType::Afmoe, "ab12345cd"), (Words{"ab", "12", "345", "cd"}));
}

TEST(PreTokenizer, DeepseekLlmLetterClass) {
  // Its letter class lists ranges of letters only: ASCII punctuation such as '[' stays outside, and the
  // trailing-space pattern takes a piece's final spaces.
  EXPECT_EQ(split(PreType::DeepseekLlm, "\xc3\xa9[\xce\xa9\xce\xac  \n"),
            (Words{"\xc3\xa9", "[", "\xce\xa9\xce\xac", "  ", "\n"}));
}

TEST(PreTokenizer, TildeIsNoSymbolForLlamaCpp) {
  // llama.cpp's collapsed \p{S} leaves out ASCII '~': it can lead a word and is no punctuation/symbol run.
  EXPECT_EQ(split(PreType::Deepseek3Llm, "~\xc3\xa9"), (Words{"~\xc3\xa9"}));
  EXPECT_EQ(split(PreType::Deepseek3Llm, "~~!"), (Words{"~~", "!"}));
  EXPECT_EQ(split(PreType::Deepseek3Llm, "$$!"), (Words{"$$!"}));
}

TEST(PreTokenizer, InvalidUtf8BecomesReplacementCharacter) {
  EXPECT_EQ(split(PreType::Gpt2, "a\xff"), (Words{"a", "\xef\xbf\xbd"}));
  // A lone surrogate survives as itself and counts as "other", like U+180E (no whitespace to llama.cpp).
  EXPECT_EQ(split(PreType::Gpt2, "a \xed\xa0\x80!"), (Words{"a", " \xed\xa0\x80!"}));
  EXPECT_EQ(split(PreType::Gpt2, "a \xe1\xa0\x8e!"), (Words{"a", " \xe1\xa0\x8e!"}));
}

}  // namespace
}  // namespace df::tokenizer
