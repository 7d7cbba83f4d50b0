// Split GGUF models (llama.cpp's gguf-split): the shared three-part copy of qwen3-q4_0 opens from its first part as
// the single file does; parts that are missing, misnumbered, miscounted, misnamed or that repeat a tensor are
// refused, naming the part's file and the key or tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/gguf/split.h"
#include "diskformer/gguf/writer.h"
#include "support/test_paths.h"

namespace df::gguf {
namespace {

namespace fs = std::filesystem;

struct PartSpec {
  std::vector<std::string> tensors;  // F32 tensors of 8 floats
  std::optional<uint64_t> no, count, total;  // split keys written where set
  bool metadata = false;                     // the model's metadata (the first part)
};

void write_part(const fs::path& path, const PartSpec& p) {
  auto w = Writer::create(path.string());
  ASSERT_TRUE(w.ok()) << w.error().message;
  if (p.metadata) {
    w->set("general.architecture", Value::string("llama"));
    w->set("general.name", Value::string("split test"));
  }
  if (p.no) w->set(kSplitNo, {ValueType::U16, *p.no});
  if (p.count) w->set(kSplitCount, {ValueType::U16, *p.count});
  if (p.total) w->set(kSplitTensorsCount, Value::i32(static_cast<int32_t>(*p.total)));
  for (const auto& t : p.tensors) ASSERT_TRUE(w->add_tensor(t, GgmlType::F32, {8}).ok());
  ASSERT_TRUE(w->write_header().ok());
  std::vector<float> data(8, 1.0f);
  for (size_t i = 0; i < p.tensors.size(); ++i) ASSERT_TRUE(w->write_data(data.data(), 32).ok());
  ASSERT_TRUE(w->finish().ok());
}

// A well-formed model of three parts m-0000K-of-00003.gguf in `dir`; `edit` changes one part's spec first.
fs::path write_model(const fs::path& dir, const std::function<void(std::vector<PartSpec>&)>& edit = {}) {
  std::vector<PartSpec> parts = {{{"a", "b"}, 0, 3, 5, true}, {{"c", "d"}, 1, 3, 5}, {{"e"}, 2, 3, 5}};
  if (edit) edit(parts);
  for (uint32_t k = 0; k < parts.size(); ++k) write_part(dir / split_path("m", k, 3), parts[k]);
  return dir / split_path("m", 0, 3);
}

TEST(Split, SharedPartsJoinToTheSingleFile) {
  DF_REQUIRE_SHARED(single, "models/qwen3-q4_0.gguf");
  DF_REQUIRE_SHARED(first, "models/split/qwen3-q4_0-00001-of-00003.gguf");
  auto one = read_file(single.string());
  auto joined = read_model(first.string());
  ASSERT_TRUE(one.ok()) << one.error().message;
  ASSERT_TRUE(joined.ok()) << joined.error().message;
  ASSERT_EQ(joined->parts.size(), 3u);
  EXPECT_EQ(joined->n_parts(), 3u);
  EXPECT_EQ(joined->path, first.string());
  ASSERT_EQ(joined->tensors.size(), one->tensors.size());
  uint64_t sizes = 0;
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(joined->part_path(k), (first.parent_path() / split_path("qwen3-q4_0", uint32_t(k), 3)).string());
    EXPECT_EQ(joined->part_size(k), fs::file_size(joined->part_path(k)));
    sizes += joined->part_size(k);
  }
  EXPECT_EQ(joined->file_size, sizes);
  for (size_t i = 0; i < one->tensors.size(); ++i) {
    const TensorInfo &a = one->tensors[i], &b = joined->tensors[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.type, b.type);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.n_bytes, b.n_bytes);
    EXPECT_LT(b.part, 3u);
    EXPECT_EQ(joined->tensor(a.name), &b);
  }
  EXPECT_EQ(joined->tensors.front().part, 0u);
  EXPECT_EQ(joined->tensors.back().part, 2u);
  // The first part's metadata: the model's, and its split keys.
  EXPECT_EQ(joined->architecture(), "qwen3");
  EXPECT_EQ(joined->get_u64_or(kSplitCount, 0), 3u);
  EXPECT_EQ(joined->get_string_or("general.name", ""), one->get_string_or("general.name", "?"));

  // A file of its own reads as before: no parts listed.
  auto plain = read_model(single.string());
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->parts.empty());
  EXPECT_EQ(plain->n_parts(), 1u);
  EXPECT_EQ(plain->part_path(0), single.string());
}

TEST(Split, ALaterPartNamesTheFirst) {
  DF_REQUIRE_SHARED(second, "models/split/qwen3-q4_0-00002-of-00003.gguf");
  auto r = read_model(second.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("part 2 of 3"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("qwen3-q4_0-00001-of-00003.gguf"), std::string::npos) << r.error().message;
}

TEST(Split, WrittenPartsJoin) {
  auto dir = test::temp_dir("split_ok");
  auto r = read_model(write_model(dir).string());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->tensors.size(), 5u);
  EXPECT_EQ(r->tensor("c")->part, 1u);
  EXPECT_EQ(r->tensor("e")->part, 2u);
  EXPECT_EQ(r->tensor("e")->offset, r->parts[2].data_offset);
}

TEST(Split, AMissingPartIsNamed) {
  auto dir = test::temp_dir("split_missing");
  auto first = write_model(dir);
  fs::remove(dir / split_path("m", 2, 3));
  auto r = read_model(first.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("part 3 of 3"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find((dir / "m-00003-of-00003.gguf").string() + ": cannot open"), std::string::npos)
      << r.error().message;
}

TEST(Split, APartOutOfOrderIsNamedWithItsKey) {
  auto dir = test::temp_dir("split_order");
  auto r = read_model(write_model(dir, [](auto& p) { p[1].no = 2; }).string());
  ASSERT_FALSE(r.ok());
  const std::string& m = r.error().message;
  EXPECT_NE(m.find((dir / "m-00002-of-00003.gguf").string() + ": metadata key 'split.no' is 2, expected 1"),
            std::string::npos) << m;
}

TEST(Split, APartWithAnotherCountIsNamed) {
  auto dir = test::temp_dir("split_count");
  auto r = read_model(write_model(dir, [](auto& p) { p[2].count = 4; p[2].no = 2; }).string());
  ASSERT_FALSE(r.ok());
  const std::string& m = r.error().message;
  EXPECT_NE(m.find((dir / "m-00003-of-00003.gguf").string() + ": metadata key 'split.count' is 4"), std::string::npos)
      << m;
  auto without = read_model(write_model(test::temp_dir("split_nocount"), [](auto& p) { p[1].count.reset(); }).string());
  ASSERT_FALSE(without.ok());
  EXPECT_NE(without.error().message.find("m-00002-of-00003.gguf: metadata key 'split.count' is missing"),
            std::string::npos) << without.error().message;
}

TEST(Split, TheTensorCountMustAddUp) {
  auto dir = test::temp_dir("split_total");
  auto r = read_model(write_model(dir, [](auto& p) { p[0].total = 6; }).string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'split.tensors.count' is 6, but the 3 parts hold 5 tensors"), std::string::npos)
      << r.error().message;
  auto none = read_model(write_model(test::temp_dir("split_nototal"), [](auto& p) { p[0].total.reset(); }).string());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("'split.tensors.count' is missing"), std::string::npos) << none.error().message;
}

TEST(Split, ATensorTwiceIsNamed) {
  auto dir = test::temp_dir("split_twice");
  auto r = read_model(write_model(dir, [](auto& p) { p[2].tensors = {"b"}; }).string());
  ASSERT_FALSE(r.ok());
  const std::string& m = r.error().message;
  EXPECT_NE(m.find((dir / "m-00003-of-00003.gguf").string() + ": tensor b"), std::string::npos) << m;
  EXPECT_NE(m.find("is also in part 1 of 3, " + (dir / "m-00001-of-00003.gguf").string()), std::string::npos) << m;
}

TEST(Split, AFirstPartNotNamedAsOneIsRefused) {
  auto dir = test::temp_dir("split_name");
  auto first = write_model(dir);
  fs::rename(first, dir / "model.gguf");
  auto r = read_model((dir / "model.gguf").string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("not named PREFIX-00001-of-00003.gguf"), std::string::npos) << r.error().message;
}

TEST(Split, KeysOfTheWrongKindAreRefused) {
  auto dir = test::temp_dir("split_keys");
  write_part(dir / "x.gguf", {{"a"}, 5, 3, 1, true});
  auto r = read_model((dir / "x.gguf").string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'split.no' is 5, past the 3 parts"), std::string::npos) << r.error().message;
  write_part(dir / "y.gguf", {{"a"}, std::nullopt, 2, 1, true});
  auto y = read_model((dir / "y.gguf").string());
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.error().message.find("'split.no' is missing"), std::string::npos) << y.error().message;
  // split.count = 1: a file of its own.
  write_part(dir / "z.gguf", {{"a"}, 0, 1, 1, true});
  auto z = read_model((dir / "z.gguf").string());
  ASSERT_TRUE(z.ok()) << z.error().message;
  EXPECT_TRUE(z->parts.empty());
}

TEST(Split, PathsOfEveryPart) {
  auto p = split_paths("/m/x-00001-of-00002.gguf", 0, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<std::string>{"/m/x-00001-of-00002.gguf", "/m/x-00002-of-00002.gguf"}));
  auto u = split_paths("http://h/r/x-00002-of-00002.gguf", 1, 2);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ((*u)[0], "http://h/r/x-00001-of-00002.gguf");
  EXPECT_FALSE(split_paths("/m/x-00001-of-00003.gguf", 0, 2).ok());
}

}  // namespace
}  // namespace df::gguf
