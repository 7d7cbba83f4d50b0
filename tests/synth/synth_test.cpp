#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "diskformer/gguf/reader.h"
#include "diskformer/gguf/breakdown.h"
#include "diskformer/synth/synth.h"
#include "support/test_paths.h"

namespace {

using df::gguf::GgmlType;

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v = exp == 0 ? std::ldexp(static_cast<float>(mant), -24) : std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

TEST(Synth, Q4CodesAreSymmetricAroundZero) {
  std::vector<uint8_t> buf(18 * 4096);
  df::synth::fill_random(GgmlType::Q4_0, 0.1f, 42, buf.data(), buf.size());
  long long sum = 0, n = 0;
  int hist[16] = {};
  for (size_t b = 0; b < buf.size(); b += 18) {
    uint16_t d;
    std::memcpy(&d, &buf[b], 2);
    EXPECT_GT(f16_to_f32(d), 0.0f);
    for (int i = 0; i < 16; ++i)
      for (int nib : {buf[b + 2 + i] & 0xf, buf[b + 2 + i] >> 4}) {
        sum += nib - 8;
        ++n;
        ++hist[nib];
      }
  }
  EXPECT_EQ(hist[0], 0) << "code 0 (-8) has no mirror image and must not occur";
  // Uniform 0..15 minus 8 would average -0.5; the symmetric codes average 0 (within sampling noise).
  EXPECT_LT(std::fabs(static_cast<double>(sum) / n), 0.03);
}

TEST(Synth, F16ValuesHaveTheRequestedSpread) {
  std::vector<uint8_t> buf(2 * 20000);
  df::synth::fill_random(GgmlType::F16, 0.5f, 3, buf.data(), buf.size());
  double s = 0, s2 = 0;
  for (size_t i = 0; i < buf.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, &buf[i], 2);
    double v = f16_to_f32(h);
    s += v;
    s2 += v * v;
  }
  double n = buf.size() / 2.0;
  EXPECT_NEAR(s / n, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(s2 / n), 0.5, 0.02);
}

class SynthFile : public ::testing::Test {
 protected:
  std::string write(const std::string& arch, const std::string& preset, GgmlType type, uint64_t seed, unsigned threads,
                    const std::string& name) {
    auto shape = df::synth::preset(arch, preset);
    EXPECT_TRUE(shape.has_value());
    df::synth::Options o;
    o.shape = *shape;
    o.type = type;
    o.tokenizer_from = tokenizer_.string();
    o.seed = seed;
    o.threads = threads;
    o.out = (dir_ / name).string();
    auto st = df::synth::write_model(o);
    EXPECT_TRUE(st.ok()) << st.error().message;
    return o.out;
  }
  void SetUp() override {
    tokenizer_ = df::test::shared_dir() / "vocab/ggml-vocab-llama-spm.gguf";
    if (!std::filesystem::exists(tokenizer_)) GTEST_SKIP() << "missing shared file " << tokenizer_;
    dir_ = df::test::temp_dir("synth");
  }
  std::filesystem::path tokenizer_, dir_;
};

TEST_F(SynthFile, SameSeedSameBytesWhateverTheThreadCount) {
  auto a = write("qwen3moe", "tiny", GgmlType::Q4_0, 5, 1, "a.gguf");
  auto b = write("qwen3moe", "tiny", GgmlType::Q4_0, 5, 3, "b.gguf");
  auto c = write("qwen3moe", "tiny", GgmlType::Q4_0, 6, 2, "c.gguf");
  auto da = slurp(a), db = slurp(b), dc = slurp(c);
  EXPECT_TRUE(da == db);
  EXPECT_FALSE(da == dc);
}

TEST_F(SynthFile, MatchesTheSharedModelsLayout) {
  // The shared qwen3moe-q8_0 model has the tiny shape and the llama SentencePiece vocabulary.
  DF_REQUIRE_SHARED(ref_path, "models/qwen3moe-q8_0.gguf");
  auto path = write("qwen3moe", "tiny", GgmlType::Q8_0, 1, 2, "m.gguf");
  auto mine = df::gguf::read_file(path);
  auto ref = df::gguf::read_file(ref_path.string());
  ASSERT_TRUE(mine.ok() && ref.ok());
  ASSERT_EQ(mine->tensors.size(), ref->tensors.size());
  for (size_t i = 0; i < ref->tensors.size(); ++i) {
    EXPECT_EQ(mine->tensors[i].name, ref->tensors[i].name);
    EXPECT_EQ(mine->tensors[i].type, ref->tensors[i].type) << ref->tensors[i].name;
    EXPECT_EQ(mine->tensors[i].shape, ref->tensors[i].shape) << ref->tensors[i].name;
  }
  for (const auto& kv : ref->metadata) {
    if (kv.key == "general.name") continue;
    const auto* v = mine->find(kv.key);
    ASSERT_NE(v, nullptr) << "missing key " << kv.key;
    EXPECT_TRUE(*v == kv.value) << kv.key << ": " << v->summary() << " vs " << kv.value.summary();
  }
}

TEST_F(SynthFile, DenseAndMixtralLayouts) {
  for (auto [arch, preset] : {std::pair{"qwen3", "tiny"}, {"llama", "tiny"}, {"llama", "mixtral-tiny"}}) {
    for (GgmlType t : {GgmlType::F16, GgmlType::BF16}) {
      auto path = write(arch, preset, t, 2, 2, std::string(arch) + preset + ".gguf");
      auto f = df::gguf::read_file(path);
      ASSERT_TRUE(f.ok()) << f.error().message;
      auto b = df::gguf::breakdown(*f);
      bool moe = std::string(preset) == "mixtral-tiny";
      EXPECT_EQ(b.expert_layers.size(), moe ? 4u : 0u) << arch << " " << preset;
      EXPECT_EQ(f->tensor("output.weight")->type, t);
      EXPECT_EQ(f->tensor("blk.0.attn_norm.weight")->type, GgmlType::F32);
      EXPECT_EQ(f->tensor("blk.0.attn_q_norm.weight") != nullptr, std::string(arch) == "qwen3");
    }
  }
}

TEST_F(SynthFile, RefusesWhatItCannotWrite) {
  auto shape = df::synth::preset("qwen3moe", "tiny");
  df::synth::Options o;
  o.shape = *shape;
  o.type = GgmlType::Q4_K;
  o.tokenizer_from = tokenizer_.string();
  o.out = (dir_ / "x.gguf").string();
  EXPECT_FALSE(df::synth::write_model(o).ok());
  o.type = GgmlType::Q4_0;
  o.tokenizer_from = "/nonexistent.gguf";
  auto st = df::synth::write_model(o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("/nonexistent.gguf"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(o.out));
  EXPECT_FALSE(df::synth::preset("qwen3moe", "nope").has_value());
}

TEST(SynthPresets, Qwen3_30B_A3B_HasTheRealShape) {
  auto s = df::synth::preset("qwen3moe", "qwen3-30b-a3b");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->n_layer, 48u);
  EXPECT_EQ(s->n_expert, 128u);
  EXPECT_EQ(s->n_expert_used, 8u);
  EXPECT_EQ(s->d_model, 2048u);
  EXPECT_EQ(s->expert_ff, 768u);
  EXPECT_EQ(s->n_head, 32u);
  EXPECT_EQ(s->n_head_kv, 4u);
  EXPECT_EQ(s->head_dim, 128u);
  // One expert record in Q4_0: 3 matrices of 2048 x 768 at 18 bytes per 32 weights = 2.65 MB (DESIGN.md).
  EXPECT_EQ(3ull * 2048 * 768 / 32 * 18, 2654208ull);
}

}  // namespace
