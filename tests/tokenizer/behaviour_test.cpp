// Special tokens, BOS/EOS, pieces, detokenization, the streaming decoder and vocabulary errors, on the shared
// vocabularies (each loaded once).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

#include "diskformer/gguf/reader.h"
#include "diskformer/tokenizer/tokenizer.h"
#include "diskformer/util/check.h"
#include "support/test_paths.h"

namespace df::tokenizer {
namespace {

const Tokenizer& load(const std::string& rel) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[rel];
  if (!slot) {
    auto t = Tokenizer::from_file((test::shared_dir() / rel).string());
    if (!t.ok()) ADD_FAILURE() << t.error().message;
    DF_CHECK(t.ok());
    slot = std::make_unique<Tokenizer>(std::move(t).value());
  }
  return *slot;
}

constexpr const char* kQwen = "models/qwen3moe-q4_0.gguf";
constexpr const char* kLlama = "vocab/ggml-vocab-llama-spm.gguf";
constexpr const char* kPhi3 = "vocab/ggml-vocab-phi-3.gguf";
constexpr const char* kGpt2 = "vocab/ggml-vocab-gpt-2.gguf";
constexpr const char* kDeepseekCoder = "vocab/ggml-vocab-deepseek-coder.gguf";
constexpr const char* kGemma4 = "vocab/ggml-vocab-gemma4.gguf";
constexpr const char* kQwen35 = "vocab/ggml-vocab-qwen35.gguf";

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

bool contains(const std::vector<int32_t>& v, int32_t id) { return std::find(v.begin(), v.end(), id) != v.end(); }

TEST(Special, ControlTokensOnlyWithParseSpecial) {
  DF_REQUIRE_SHARED(p, kQwen);
  const Tokenizer& tok = load(kQwen);
  const std::string text = "<|im_start|>user\nHi<|im_end|>\n";
  const int32_t im_start = tok.find("<|im_start|>"), im_end = tok.find("<|im_end|>");
  ASSERT_NE(im_start, kNoToken);
  const auto on = tok.encode(text, {.parse_special = true});
  ASSERT_FALSE(on.empty());
  EXPECT_EQ(on.front(), im_start);
  EXPECT_TRUE(contains(on, im_end));
  EXPECT_EQ(tok.decode(on, {.render_special = true}), text);
  const auto off = tok.encode(text);
  EXPECT_FALSE(contains(off, im_start));
  EXPECT_FALSE(contains(off, im_end));
  EXPECT_GT(off.size(), on.size());
  EXPECT_EQ(tok.decode(off), text);  // the marker text comes back as ordinary text
}

TEST(Special, SpmSpacePrefixAfterSpecialToken) {
  DF_REQUIRE_SHARED(p, kLlama);
  const Tokenizer& tok = load(kLlama);
  auto hi = tok.encode("Hi", {.add_bos = false});
  auto with = tok.encode("<s>Hi", {.add_bos = false, .parse_special = true});
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with.front(), tok.bos());
  EXPECT_EQ(std::vector<int32_t>(with.begin() + 1, with.end()), hi);
  EXPECT_FALSE(contains(tok.encode("<s>Hi", {.add_bos = false}), tok.bos()));
}

TEST(Special, UserDefinedTokensAlwaysMatch) {
  DF_REQUIRE_SHARED(p, kDeepseekCoder);
  const Tokenizer& tok = load(kDeepseekCoder);
  const int32_t assistant = tok.find("<|Assistant|>");
  ASSERT_NE(assistant, kNoToken);
  EXPECT_TRUE(contains(tok.encode("a<|Assistant|>b", {.add_bos = false}), assistant));
  EXPECT_TRUE(contains(tok.encode("a<|Assistant|>b", {.add_bos = false, .parse_special = true}), assistant));
}

TEST(Special, Phi3StripsSpacesAfterControlTokens) {
  DF_REQUIRE_SHARED(p, kPhi3);
  const Tokenizer& tok = load(kPhi3);
  const int32_t end = tok.find("<|end|>");
  ASSERT_NE(end, kNoToken);
  auto ids = tok.encode("<|end|>\n  hi", {.add_bos = false, .parse_special = true});
  auto hi = tok.encode("hi", {.add_bos = false});
  hi.insert(hi.begin(), end);
  EXPECT_EQ(ids, hi);
}

TEST(BosEos, VocabularyDefaultsAndOverrides) {
  DF_REQUIRE_SHARED(q, kQwen);
  DF_REQUIRE_SHARED(l, kLlama);
  const Tokenizer& qwen = load(kQwen);
  const Tokenizer& llama = load(kLlama);
  EXPECT_FALSE(qwen.add_bos());
  EXPECT_TRUE(llama.add_bos());
  EXPECT_NE(qwen.encode("Hi").front(), qwen.bos());
  EXPECT_EQ(qwen.encode("Hi", {.add_bos = true}).front(), qwen.bos());
  EXPECT_EQ(llama.encode("Hi").front(), llama.bos());
  EXPECT_NE(llama.encode("Hi", {.add_bos = false}).front(), llama.bos());
  EXPECT_EQ(llama.encode("Hi", {.add_eos = true}).back(), llama.eos());
  EXPECT_EQ(llama.encode(""), std::vector<int32_t>{llama.bos()});
  EXPECT_TRUE(llama.encode("", {.add_bos = false}).empty());
}

TEST(Pieces, SpmAndByteLevel) {
  DF_REQUIRE_SHARED(q, kQwen);
  DF_REQUIRE_SHARED(l, kLlama);
  const Tokenizer& llama = load(kLlama);
  EXPECT_EQ(llama.token_to_piece(llama.bos()), "");
  EXPECT_EQ(llama.token_to_piece(llama.bos(), true), "<s>");
  EXPECT_EQ(llama.token_to_piece(llama.find("<0x0A>")), "\n");
  EXPECT_EQ(llama.nl(), llama.find("<0x0A>"));
  const int32_t hello = llama.find("\xe2\x96\x81Hello");
  ASSERT_NE(hello, kNoToken);
  EXPECT_EQ(llama.token_to_piece(hello), " Hello");
  EXPECT_EQ(llama.token_to_piece(hello, false, 1), "Hello");
  EXPECT_EQ(llama.token_to_piece(-1), "");
  EXPECT_EQ(llama.token_to_piece(static_cast<int32_t>(llama.n_vocab())), "");

  const Tokenizer& qwen = load(kQwen);
  EXPECT_EQ(qwen.token_to_piece(qwen.find("\xc4\xa0world")), " world");  // U+0120 is the byte ' '
  EXPECT_EQ(qwen.token_to_piece(qwen.find("\xc4\x8a")), "\n");
  EXPECT_EQ(qwen.nl(), qwen.find("\xc4\x8a"));
  EXPECT_EQ(qwen.token_to_piece(qwen.find("<|im_end|>")), "");
  EXPECT_EQ(qwen.token_to_piece(qwen.find("<|im_end|>"), true), "<|im_end|>");
}

TEST(Eog, FromMetadataAndTokenText) {
  DF_REQUIRE_SHARED(q, kQwen);
  DF_REQUIRE_SHARED(l, kLlama);
  const Tokenizer& qwen = load(kQwen);
  EXPECT_TRUE(qwen.is_eog(qwen.find("<|im_end|>")));
  EXPECT_TRUE(qwen.is_eog(qwen.find("<|endoftext|>")));
  EXPECT_FALSE(qwen.is_eog(qwen.find("Hello")));
  EXPECT_FALSE(qwen.is_eog(kNoToken));
  EXPECT_EQ(qwen.eos(), qwen.find("<|im_end|>"));
  const Tokenizer& llama = load(kLlama);
  EXPECT_TRUE(llama.is_eog(llama.eos()));
  EXPECT_FALSE(llama.is_eog(llama.bos()));
}

TEST(Decode, CleanSpacesWhereTheVocabularyAsks) {
  DF_REQUIRE_SHARED(g, kGpt2);
  DF_REQUIRE_SHARED(q, kQwen);
  const Tokenizer& gpt2 = load(kGpt2);
  const std::string text = "Hello , world ! it 's ' quoted '";
  const auto ids = gpt2.encode(text);
  EXPECT_EQ(gpt2.decode(ids), "Hello, world! it's'quoted '");
  EXPECT_EQ(gpt2.decode(ids, {.clean_spaces = false}), text);
  const Tokenizer& qwen = load(kQwen);  // qwen2 turns clean-up off
  EXPECT_EQ(qwen.decode(qwen.encode(text)), text);
}

TEST(Decode, RemoveSpecialDropsBosAndKeepsSpmSpace) {
  DF_REQUIRE_SHARED(l, kLlama);
  const Tokenizer& llama = load(kLlama);
  const auto ids = llama.encode("Hello world");
  EXPECT_EQ(llama.decode(ids), " Hello world");  // BOS first: the prefix space stays (llama.cpp)
  EXPECT_EQ(llama.decode(ids, {.remove_special = true}), " Hello world");
  EXPECT_EQ(llama.decode(std::span(ids).subspan(1)), "Hello world");
  EXPECT_EQ(llama.decode(ids, {.render_special = true}), "<s> Hello world");
}

// gemma4: BPE merges over the text with spaces as U+2581, one word per line and per newline run.
TEST(Gemma4, SpacesBecomeMarksAndNewlineRunsStayWhole) {
  DF_REQUIRE_SHARED(g, kGemma4);
  const Tokenizer& tok = load(kGemma4);
  const int32_t hello = tok.find("Hello"), world = tok.find("\xe2\x96\x81world");
  const int32_t three_nl = tok.find("\n\n\n"), two_spaces = tok.find("\xe2\x96\x81\xe2\x96\x81");
  ASSERT_NE(world, kNoToken);
  ASSERT_NE(three_nl, kNoToken);
  ASSERT_NE(two_spaces, kNoToken);
  EXPECT_EQ(tok.encode("Hello world\n\n\n", {.add_bos = false}), (std::vector<int32_t>{hello, world, three_nl}));
  EXPECT_EQ(tok.token_to_piece(world), " world");
  EXPECT_EQ(tok.token_to_piece(two_spaces), "  ");
  EXPECT_EQ(tok.nl(), tok.find("\n"));
  // No space prefix: the first word keeps no mark, and decode adds or strips nothing.
  EXPECT_FALSE(tok.vocab().add_space_prefix);
  EXPECT_EQ(tok.decode(tok.encode("Hello world")), "Hello world");
  // A U+2581 written in the text is a space to the merges, as in llama.cpp: it comes back as ' '.
  EXPECT_EQ(tok.encode(" \xe2\x96\x81x", {.add_bos = false}), (std::vector<int32_t>{two_spaces, tok.find("x")}));
}

TEST(Gemma4, CharactersWithoutATokenFallBackToBytes) {
  DF_REQUIRE_SHARED(g, kGemma4);
  const Tokenizer& tok = load(kGemma4);
  ASSERT_EQ(tok.find("\xf0\x9f\xa6\x99"), kNoToken);  // no token for the llama emoji
  const std::vector<int32_t> bytes = {tok.find("<0xF0>"), tok.find("<0x9F>"), tok.find("<0xA6>"),
                                      tok.find("<0x99>")};
  EXPECT_EQ(tok.encode("\xf0\x9f\xa6\x99", {.add_bos = false}), bytes);
  EXPECT_EQ(tok.token_to_piece(bytes[0]), "\xf0");
  EXPECT_EQ(tok.decode(bytes), "\xf0\x9f\xa6\x99");
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(bytes[0]), "");
  EXPECT_EQ(dec.push(bytes[1]), "");
  EXPECT_EQ(dec.push(bytes[2]), "");
  EXPECT_EQ(dec.push(bytes[3]), "\xf0\x9f\xa6\x99");
  // Invalid UTF-8 gets no byte fallback: as for byte-level BPE, each bad byte is U+FFFD before the merges.
  EXPECT_EQ(tok.decode(tok.encode("a\xff", {.add_bos = false})), "a\xef\xbf\xbd");
}

TEST(Gemma4, BosAlwaysAndItsEndOfGenerationTokens) {
  DF_REQUIRE_SHARED(g, kGemma4);
  const Tokenizer& tok = load(kGemma4);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.encode("Hi").front(), tok.bos());
  EXPECT_EQ(tok.token_to_piece(tok.bos()), "");
  EXPECT_EQ(tok.token_to_piece(tok.bos(), true), "<bos>");
  const int32_t end_of_turn = tok.find("<end_of_turn>"), eos_text = tok.find("<eos>");
  EXPECT_EQ(tok.eos(), end_of_turn);
  EXPECT_TRUE(tok.is_eog(end_of_turn));
  EXPECT_TRUE(tok.is_eog(eos_text));  // stored as a normal token; llama.cpp makes it a control token that ends
  EXPECT_TRUE(tok.is_control(eos_text));
  EXPECT_FALSE(tok.is_eog(tok.find("Hello")));
  const std::string turn = "Hi<end_of_turn>\n";
  const auto on = tok.encode(turn, {.add_bos = false, .parse_special = true});
  EXPECT_EQ(on, (std::vector<int32_t>{tok.find("Hi"), end_of_turn, tok.nl()}));
  EXPECT_FALSE(contains(tok.encode(turn, {.add_bos = false}), end_of_turn));
  EXPECT_EQ(tok.decode(on, {.render_special = true}), turn);

  // llama.cpp adds BOS to a gemma4 vocabulary even where the file says not to, and ignores the file's
  // pre-tokenizer name: tokenizer.ggml.model decides both.
  auto f = gguf::read_file(g.string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  for (auto& kv : f->metadata) {
    if (kv.key == "tokenizer.ggml.add_bos_token") kv.value = gguf::Value::boolean(false);
  }
  std::erase_if(f->metadata, [](const gguf::KeyValue& kv) { return kv.key == "tokenizer.ggml.pre"; });
  f->metadata.push_back({.key = "tokenizer.ggml.pre", .value = gguf::Value::string("gpt-2")});
  f->reindex();
  auto other = Tokenizer::from_gguf(*f);
  ASSERT_TRUE(other.ok()) << other.error().message;
  EXPECT_TRUE(other->add_bos());
  EXPECT_EQ(other->vocab().pre_type, PreType::Gemma4);
  EXPECT_EQ(other->encode("Hello world\n\n\n"), tok.encode("Hello world\n\n\n"));
}

// qwen35: letter runs take combining marks along, where qwen2's leave a mark to the punctuation run.  The
// shared qwen35 suite tokenizes alike under both splitters, so this is the case that tells them apart.
TEST(Qwen35, CombiningMarksStayWithTheirLetters) {
  DF_REQUIRE_SHARED(a, kQwen35);
  DF_REQUIRE_SHARED(b, kQwen);
  const Tokenizer& qwen35 = load(kQwen35);
  const Tokenizer& qwen2 = load(kQwen);  // the same Qwen vocabulary under the qwen2 splitter
  const std::string beh_fatha = "\xd8\xa8\xd9\x8e";  // U+0628 U+064E: a letter and its combining vowel mark
  EXPECT_EQ(qwen35.encode(beh_fatha).size(), 1u);
  EXPECT_EQ(qwen2.encode(beh_fatha).size(), 2u);
  EXPECT_EQ(qwen35.encode("Hello world"), qwen2.encode("Hello world"));
  EXPECT_EQ(qwen35.decode(qwen35.encode(beh_fatha)), beh_fatha);
  EXPECT_EQ(qwen35.vocab().pre_type, PreType::Qwen35);
  EXPECT_FALSE(qwen35.add_bos());
}

TEST(InvalidUtf8, ByteLevelReplacesAndSpmKeepsBytes) {
  DF_REQUIRE_SHARED(q, kQwen);
  DF_REQUIRE_SHARED(l, kLlama);
  const Tokenizer& qwen = load(kQwen);
  EXPECT_EQ(qwen.decode(qwen.encode("a\xff" "b\xe2\x82")), "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd");
  const Tokenizer& llama = load(kLlama);
  const auto ids = llama.encode("a\xff" "b\xe2\x82", {.add_bos = false});
  EXPECT_TRUE(contains(ids, llama.find("<0xFF>")));
  EXPECT_EQ(llama.decode(ids), "a\xff" "b\xe2\x82");
}

// Every push emits valid UTF-8, the total equals decode(), and a character split across tokens is held back.
void check_stream(const Tokenizer& tok, const std::string& text, bool spm) {
  const auto ids = tok.encode(text, {.add_bos = false});
  StreamDecoder dec(tok, {.strip_leading_space = spm});
  std::string total;
  int held = 0;
  for (int32_t id : ids) {
    std::string out = dec.push(id);
    EXPECT_TRUE(valid_utf8(out)) << "after id " << id;
    held += dec.pending_bytes() > 0;
    total += out;
  }
  total += dec.flush();
  EXPECT_EQ(dec.pending_bytes(), 0u);
  EXPECT_EQ(total, text);
  EXPECT_GT(held, 0) << "no character was split across tokens in this text";
}

TEST(Stream, HoldsBackSplitCharacters) {
  DF_REQUIRE_SHARED(q, kQwen);
  DF_REQUIRE_SHARED(l, kLlama);
  const std::string text = "Llamas 🦙 and rockets 🚀 say нещо на Български, ကာ 😶‍🌫️!";
  check_stream(load(kQwen), text, false);
  check_stream(load(kLlama), text, true);
  if (std::filesystem::exists(test::shared_dir() / kGemma4)) check_stream(load(kGemma4), text, false);
}

TEST(Stream, ExactBytesOfAnSpmEmoji) {
  DF_REQUIRE_SHARED(l, kLlama);
  const Tokenizer& tok = load(kLlama);
  const std::vector<int32_t> bytes = {tok.find("<0xF0>"), tok.find("<0x9F>"), tok.find("<0xA6>"),
                                      tok.find("<0x99>")};
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(bytes[0]), "");
  EXPECT_EQ(dec.push(bytes[1]), "");
  EXPECT_EQ(dec.push(bytes[2]), "");
  EXPECT_EQ(dec.pending_bytes(), 3u);
  EXPECT_EQ(dec.push(bytes[3]), "\xf0\x9f\xa6\x99");
  // An unfinished character comes out on flush; stray continuation bytes are not held.
  EXPECT_EQ(dec.push(bytes[0]), "");
  EXPECT_EQ(dec.flush(), "\xf0");
  EXPECT_EQ(dec.push(tok.find("<0x80>")), "\x80");
  // A lead byte followed by ASCII will never complete: both go out together.
  EXPECT_EQ(dec.push(tok.find("<0xE2>")), "");
  EXPECT_EQ(dec.push(tok.find("<0x41>")), "\xe2" "A");
}

TEST(Errors, UnknownPreTokenizerIsNamed) {
  DF_REQUIRE_SHARED(p, kGpt2);
  auto f = gguf::read_file(p.string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  for (auto& kv : f->metadata)
    if (kv.key == "tokenizer.ggml.pre") kv.value = gguf::Value::string("no-such-splitter");
  f->reindex();
  auto t = Tokenizer::from_gguf(*f);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("unknown pre-tokenizer 'no-such-splitter'"), std::string::npos)
      << t.error().message;
  EXPECT_NE(t.error().message.find("tokenizer.ggml.pre"), std::string::npos);
  EXPECT_NE(t.error().message.find(p.string()), std::string::npos);
}

TEST(Errors, MissingMergesAndWrongTypesNameTheKey) {
  DF_REQUIRE_SHARED(p, kGpt2);
  auto f = gguf::read_file(p.string());
  ASSERT_TRUE(f.ok());
  gguf::File no_merges = *f;
  std::erase_if(no_merges.metadata, [](const gguf::KeyValue& kv) { return kv.key == "tokenizer.ggml.merges"; });
  no_merges.reindex();
  auto t = Tokenizer::from_gguf(no_merges);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("tokenizer.ggml.merges"), std::string::npos) << t.error().message;

  gguf::File bad_types = *f;
  for (auto& kv : bad_types.metadata)
    if (kv.key == "tokenizer.ggml.token_type") kv.value = gguf::Value::u32(3);
  bad_types.reindex();
  t = Tokenizer::from_gguf(bad_types);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("tokenizer.ggml.token_type"), std::string::npos) << t.error().message;

  gguf::File bad_id = *f;
  for (auto& kv : bad_id.metadata)
    if (kv.key == "tokenizer.ggml.bos_token_id") kv.value = gguf::Value::string("50256");
  bad_id.reindex();
  t = Tokenizer::from_gguf(bad_id);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("tokenizer.ggml.bos_token_id"), std::string::npos) << t.error().message;

  gguf::File far_id = *f;  // an id outside the vocabulary keeps the model type's default (llama.cpp warns)
  for (auto& kv : far_id.metadata)
    if (kv.key == "tokenizer.ggml.eos_token_id") kv.value = gguf::Value::u32(999999);
  far_id.reindex();
  t = Tokenizer::from_gguf(far_id);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->eos(), 11);

  gguf::File no_vocab = *f;
  std::erase_if(no_vocab.metadata, [](const gguf::KeyValue& kv) { return kv.key.starts_with("tokenizer."); });
  no_vocab.reindex();
  t = Tokenizer::from_gguf(no_vocab);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("tokenizer.ggml.model"), std::string::npos) << t.error().message;
}

}  // namespace
}  // namespace df::tokenizer

namespace df::tokenizer {
namespace {

// Seeded random text from pieces that stress the splitters: spaces and newlines runs, digits, contractions,
// letters of several scripts, emoji with joiners, control characters, special-token look-alikes.
std::string random_text(std::mt19937& rng, size_t pieces) {
  static const std::vector<std::string> kParts = {
      " ", "  ", "\n", "\r\n", "\t", "   \n ", "a", "Hello", "world", "'s", "'LL", "123", "4567890", "½",
      "é", "Ä", "ß", "日本語", "한국어", "Привет", "مرحبا", "ကာ", "🦙", "😶\xe2\x80\x8d🌫\xef\xb8\x8f", "!", "?!.",
      "...", "~", "$", "(", ")", "<|im_end|>", "<s>", "</s>", "\x01", "\x7f", "\xc2\x85", "\xc2\xa0", "\xe3\x80\x80",
  };
  std::string s;
  std::uniform_int_distribution<size_t> pick(0, kParts.size() - 1);
  for (size_t i = 0; i < pieces; ++i) s += kParts[pick(rng)];
  return s;
}

TEST(RoundTrip, RandomTextThroughEveryVocabulary) {
  for (const char* rel :
       {kQwen, kLlama, kGpt2, kDeepseekCoder, kPhi3, "vocab/ggml-vocab-falcon.gguf", kGemma4, kQwen35}) {
    if (!std::filesystem::exists(test::shared_dir() / rel)) GTEST_SKIP() << "missing shared file " << rel;
    const Tokenizer& tok = load(rel);
    std::mt19937 rng(1234);
    for (int i = 0; i < 40; ++i) {
      const std::string text = random_text(rng, 1 + i % 25);
      const auto ids = tok.encode(text, {.add_bos = false});
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && static_cast<size_t>(id) < tok.n_vocab()) << rel;
      EXPECT_EQ(tok.decode(ids, {.clean_spaces = false}), text) << rel << " case " << i;
      // Streaming gives the same bytes.
      StreamDecoder dec(tok, {.strip_leading_space = tok.vocab().add_space_prefix});
      std::string streamed;
      for (int32_t id : ids) streamed += dec.push(id);
      streamed += dec.flush();
      EXPECT_EQ(streamed, text) << rel << " case " << i;
    }
  }
}

}  // namespace
}  // namespace df::tokenizer
