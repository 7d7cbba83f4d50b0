#include <gtest/gtest.h>

#include <filesystem>

#include "diskformer/gguf/reader.h"
#include "gguf/gguf_builder.h"
#include "support/test_paths.h"

namespace {

using df::gguf::GgmlType;
using df::test::Bytes;

df::Result<df::gguf::File> parse_bytes(const Bytes& x) {
  auto src = df::gguf::memory_source(x.b.data(), x.b.size());
  return df::gguf::parse(*src, "test.gguf");
}

// Expects a parse error whose message names the field and the offset.
void expect_error(const Bytes& x, const std::string& field, uint64_t offset, const std::string& what) {
  auto r = parse_bytes(x);
  ASSERT_FALSE(r.ok()) << "parsed a file that should fail: " << what;
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("test.gguf: "), std::string::npos) << m;
  EXPECT_NE(m.find(field), std::string::npos) << "field '" << field << "' not in: " << m;
  EXPECT_NE(m.find("at offset " + std::to_string(offset)), std::string::npos) << "offset not in: " << m;
  EXPECT_NE(m.find(what), std::string::npos) << "'" << what << "' not in: " << m;
}

// A valid file: one u32 key, two F32 tensors of 8 and 4 elements.
Bytes valid_file() {
  Bytes x = df::test::header(3, 2, 1);
  df::test::kv_u32(x, "general.alignment", 32);
  df::test::tensor_f32(x, "a", {8}, 0);
  df::test::tensor_f32(x, "b", {2, 2}, 32);
  x.pad_to(32).zeros(32 + 16);
  return x;
}

TEST(GgufReader, ParsesAHandBuiltFile) {
  auto r = parse_bytes(valid_file());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->version, 3u);
  ASSERT_EQ(r->tensors.size(), 2u);
  EXPECT_EQ(r->tensors[1].shape, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(r->tensors[1].n_bytes, 16u);
  EXPECT_EQ(r->tensors[0].offset, r->data_offset);
  EXPECT_EQ(r->tensors[1].offset, r->data_offset + 32);
  EXPECT_EQ(r->data_offset % 32, 0u);
  EXPECT_EQ(*r->get_u64("general.alignment"), 32u);
  EXPECT_NE(r->tensor("b"), nullptr);
  EXPECT_EQ(r->tensor("c"), nullptr);
}

TEST(GgufReader, EveryTruncationIsAnErrorNotACrash) {
  Bytes full = valid_file();
  for (size_t n = 0; n < full.size(); ++n) {
    Bytes cut;
    cut.b.assign(full.b.begin(), full.b.begin() + static_cast<long>(n));
    auto r = parse_bytes(cut);
    EXPECT_FALSE(r.ok()) << "a file cut to " << n << " bytes parsed";
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("offset"), std::string::npos) << r.error().message;
    }
  }
}

TEST(GgufReader, WrongMagic) {
  Bytes x = valid_file();
  x.b[0] = 'X';
  expect_error(x, "magic", 0, "wrong magic");
}

TEST(GgufReader, UnsupportedVersions) {
  for (uint32_t v : {1u, 4u, 0x03000000u}) {
    Bytes x = df::test::header(v, 0, 0);
    expect_error(x, "version", 4, "unsupported GGUF version");
  }
  Bytes v2 = df::test::header(2, 0, 0);
  EXPECT_TRUE(parse_bytes(v2).ok());
}

TEST(GgufReader, CountsThatCannotFit) {
  expect_error(df::test::header(3, 1ull << 60, 0), "tensor_count", 8, "cannot fit");
  expect_error(df::test::header(3, 0, 1ull << 40), "metadata_kv_count", 16, "cannot fit");
}

TEST(GgufReader, StringLengthThatCannotFit) {
  Bytes x = df::test::header(3, 0, 1);
  x.put<uint64_t>(1ull << 50);
  x.zeros(16);
  expect_error(x, "metadata[0] key", 24, "exceeds");
}

TEST(GgufReader, InvalidValueAndElementTypes) {
  Bytes x = df::test::header(3, 0, 1);
  x.str("k").put<uint32_t>(13).put<uint32_t>(0);
  expect_error(x, "metadata key 'k' type", 33, "invalid value type 13");

  Bytes y = df::test::header(3, 0, 1);
  y.str("arr").put<uint32_t>(9).put<uint32_t>(99).put<uint64_t>(0);
  expect_error(y, "element type", 39, "invalid array element type 99");

  Bytes z = df::test::header(3, 0, 1);
  z.str("flag").put<uint32_t>(7).put<uint8_t>(2);
  expect_error(z, "metadata key 'flag'", 40, "invalid bool");
}

TEST(GgufReader, ArrayCountThatCannotFit) {
  Bytes x = df::test::header(3, 0, 1);
  x.str("arr").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(1ull << 40).zeros(64);
  expect_error(x, "count", 43, "cannot fit");
}

TEST(GgufReader, NestedArraysAndTheirDepthLimit) {
  // [[1, 2], [3]] as an array of arrays of u8.
  Bytes x = df::test::header(3, 0, 1);
  x.str("nested").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(2);
  x.put<uint32_t>(0).put<uint64_t>(2).put<uint8_t>(1).put<uint8_t>(2);
  x.put<uint32_t>(0).put<uint64_t>(1).put<uint8_t>(3);
  auto r = parse_bytes(x);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto* a = r->find("nested")->array();
  ASSERT_EQ(a->items.size(), 2u);
  EXPECT_EQ(a->items[0].array()->items.size(), 2u);
  EXPECT_EQ(*a->items[1].array()->items[0].to_u64(), 3u);

  Bytes deep = df::test::header(3, 0, 1);
  deep.str("deep").put<uint32_t>(9);
  for (int i = 0; i < 20; ++i) deep.put<uint32_t>(9).put<uint64_t>(1);
  deep.zeros(64);
  auto d = parse_bytes(deep);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("nested deeper"), std::string::npos) << d.error().message;
}

TEST(GgufReader, DuplicateKeysAndTensorNames) {
  Bytes x = df::test::header(3, 0, 2);
  df::test::kv_u32(x, "k", 1);
  size_t second = x.size();
  df::test::kv_u32(x, "k", 2);
  expect_error(x, "metadata key 'k'", second, "duplicate key (first at offset 24)");

  Bytes y = df::test::header(3, 2, 0);
  df::test::tensor_f32(y, "t", {8}, 0);
  size_t at = y.size();
  df::test::tensor_f32(y, "t", {8}, 32);
  y.pad_to(32).zeros(64);
  expect_error(y, "tensor 't'", at, "duplicate tensor name");
}

TEST(GgufReader, BadDimensions) {
  Bytes zero = df::test::header(3, 1, 0);
  df::test::tensor_f32(zero, "z", {4, 0}, 0);
  zero.pad_to(32).zeros(32);
  expect_error(zero, "tensor 'z' dims[1]", 24 + 9 + 4 + 8, "zero dimension");

  Bytes over = df::test::header(3, 1, 0);
  df::test::tensor_f32(over, "o", {1ull << 40, 1ull << 40}, 0);
  over.pad_to(32).zeros(32);
  expect_error(over, "tensor 'o' dims[1]", 24 + 9 + 4 + 8, "overflow");

  Bytes many = df::test::header(3, 1, 0);
  df::test::tensor_f32(many, "m", {1, 1, 1, 1, 1}, 0);
  many.pad_to(32).zeros(32);
  expect_error(many, "tensor 'm' n_dims", 24 + 9, "has 5 dimensions");

  Bytes block = df::test::header(3, 1, 0);
  block.str("q").put<uint32_t>(1).put<uint64_t>(33).put<uint32_t>(2).put<uint64_t>(0);
  block.pad_to(32).zeros(64);
  expect_error(block, "tensor 'q' dims[0]", 24 + 9 + 4, "not a multiple of the q4_0 block of 32");
}

TEST(GgufReader, UnknownTypeNamesTheTensor) {
  Bytes x = df::test::header(3, 1, 0);
  x.str("weird").put<uint32_t>(1).put<uint64_t>(32).put<uint32_t>(4).put<uint64_t>(0);
  x.pad_to(32).zeros(64);
  expect_error(x, "tensor 'weird' type", 24 + 13 + 4 + 8, "unknown or removed ggml type code 4");
}

TEST(GgufReader, DataOutsideTheFileOverlapsAndMisalignment) {
  Bytes past = df::test::header(3, 1, 0);
  df::test::tensor_f32(past, "p", {64}, 0);
  past.pad_to(32).zeros(100);  // 256 bytes needed
  expect_error(past, "tensor 'p' data", 24, "past the end of the file");

  Bytes overlap = df::test::header(3, 2, 0);
  df::test::tensor_f32(overlap, "a", {16}, 0);
  size_t b_at = overlap.size();
  df::test::tensor_f32(overlap, "b", {16}, 32);  // a covers [0, 64)
  overlap.pad_to(32).zeros(128);
  expect_error(overlap, "tensor 'b' data", b_at, "overlap tensor 'a'");

  Bytes mis = df::test::header(3, 1, 0);
  df::test::tensor_f32(mis, "m", {4}, 8);
  mis.pad_to(32).zeros(64);
  expect_error(mis, "tensor 'm' offset", 24 + 9 + 4 + 8 + 4, "not a multiple of the alignment 32");
}

TEST(GgufReader, AlignmentKeyMustBeAPowerOfTwo) {
  Bytes x = df::test::header(3, 0, 1);
  df::test::kv_u32(x, "general.alignment", 48);
  expect_error(x, "general.alignment", 24, "power of two");

  Bytes y = df::test::header(3, 1, 1);
  df::test::kv_u32(y, "general.alignment", 64);
  df::test::tensor_f32(y, "t", {4}, 0);
  y.pad_to(64).zeros(16);
  auto r = parse_bytes(y);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->alignment, 64u);
  EXPECT_EQ(r->data_offset % 64, 0u);
}

TEST(GgufReader, TypedLookupsNameTheKey) {
  auto r = parse_bytes(valid_file());
  ASSERT_TRUE(r.ok());
  auto missing = r->get_string("general.name");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("'general.name' is missing"), std::string::npos);
  auto wrong = r->get_string("general.alignment");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("expected a string, found u32"), std::string::npos) << wrong.error().message;
}

TEST(GgufReader, MissingFileAndDirectory) {
  auto r = df::gguf::read_file("/nonexistent/model.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("/nonexistent/model.gguf: cannot open"), std::string::npos);
  auto d = df::gguf::read_file("/tmp");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("not a regular file"), std::string::npos);
}

TEST(GgufReader, ReadsEverySharedFile) {
  DF_REQUIRE_SHARED(models, "models");
  int n = 0;
  for (const char* dir : {"models", "vocab"})
    for (const auto& e : std::filesystem::directory_iterator(df::test::shared_dir() / dir)) {
      if (e.path().extension() != ".gguf") continue;
      auto r = df::gguf::read_file(e.path().string());
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_GT(r->metadata.size(), 0u);
      EXPECT_FALSE(r->get_string_or("tokenizer.ggml.model", "").empty()) << e.path();
      for (const auto& t : r->tensors) EXPECT_LE(t.offset + t.n_bytes, r->file_size);
      ++n;
    }
  EXPECT_GE(n, 10);  // five models and five vocabularies
}

TEST(GgufReader, SharedQwen3MoeShape) {
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  auto r = df::gguf::read_file(path.string());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->architecture(), "qwen3moe");
  EXPECT_EQ(*r->get_u64("qwen3moe.expert_count"), 16u);
  const auto* t = r->tensor("blk.0.ffn_down_exps.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, GgmlType::Q4_0);
  EXPECT_EQ(t->shape, (std::vector<uint64_t>{64, 64, 16}));
  EXPECT_EQ(t->n_bytes, 64u * 64 * 16 / 32 * 18);
  const auto* tokens = r->find("tokenizer.ggml.tokens")->array();
  EXPECT_EQ(tokens->items.size(), 151936u);
}

}  // namespace
