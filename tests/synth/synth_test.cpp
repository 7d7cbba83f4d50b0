#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "diskformer/backend/cpu/dequant.h"
#include "diskformer/engine/model.h"
#include "diskformer/gguf/reader.h"
#include "diskformer/gguf/breakdown.h"
#include "diskformer/synth/synth.h"
#include "support/sessions.h"
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

TEST(Synth, EveryQuantizedTypeIsSymmetricWithTheRequestedSpread) {
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
    const uint64_t n = 256 * 512;
    std::vector<uint8_t> buf(df::gguf::row_bytes(t, n));
    df::synth::fill_random(t, 0.05f, 11, buf.data(), buf.size());
    std::vector<float> v(n);
    df::cpu::dequantize_row(t, buf.data(), int64_t(n), v.data());
    double s = 0, s2 = 0;
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x)) << df::gguf::type_name(t);
      s += x, s2 += double(x) * x;
    }
    const double mean = s / double(n), rms = std::sqrt(s2 / double(n));
    EXPECT_LT(std::fabs(mean), 0.01 * rms) << df::gguf::type_name(t);
    EXPECT_NEAR(rms, 0.05, 0.01) << df::gguf::type_name(t);
  }
}

TEST_F(SynthFile, MixesTypeEveryTensorAsLlamaCppsQuantizer) {
  // The shared K-quant files were written by llama-quantize: synth with the same shape and mix must give every
  // tensor the same type.
  const std::pair<const char*, const char*> files[] = {{"qwen3-q6_k", "q6_k"},         {"qwen3-q2_k", "q2_k"},
                                                       {"qwen3moe-q4_k_m", "q4_k_m"}, {"qwen3moe-q3_k_m", "q3_k_m"},
                                                       {"qwen3moe-iq4_xs", "iq4_xs"}, {"mixtral-q5_k_m", "q5_k_m"}};
  for (const auto& [file, mix] : files) {
    DF_REQUIRE_SHARED(ref_path, std::string("models/") + file + ".gguf");
    auto ref = df::gguf::read_file(ref_path.string());
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    const std::string arch = ref->architecture(), a = arch + ".";
    df::synth::Options o;
    o.shape.arch = arch;
    o.shape.n_layer = uint32_t(ref->get_u64_or(a + "block_count", 0));
    o.shape.d_model = uint32_t(ref->get_u64_or(a + "embedding_length", 0));
    o.shape.n_head = uint32_t(ref->get_u64_or(a + "attention.head_count", 0));
    o.shape.n_head_kv = uint32_t(ref->get_u64_or(a + "attention.head_count_kv", 0));
    o.shape.head_dim = uint32_t(ref->get_u64_or(a + "attention.key_length", o.shape.d_model / o.shape.n_head));
    o.shape.ff = uint32_t(ref->get_u64_or(a + "feed_forward_length", 0));
    o.shape.n_expert = uint32_t(ref->get_u64_or(a + "expert_count", 0));
    o.shape.n_expert_used = uint32_t(ref->get_u64_or(a + "expert_used_count", 0));
    o.shape.expert_ff = uint32_t(ref->get_u64_or(a + "expert_feed_forward_length", 0));
    o.mix = df::synth::mix_from_name(mix);
    ASSERT_TRUE(o.mix.has_value()) << mix;
    o.tokenizer_from = ref_path.string();
    o.out = (dir_ / (std::string(file) + ".gguf")).string();
    auto st = df::synth::write_model(o);
    ASSERT_TRUE(st.ok()) << st.error().message;
    auto mine = df::gguf::read_file(o.out);
    ASSERT_TRUE(mine.ok());
    ASSERT_EQ(mine->tensors.size(), ref->tensors.size()) << file;
    for (size_t i = 0; i < ref->tensors.size(); ++i) {
      EXPECT_EQ(mine->tensors[i].name, ref->tensors[i].name) << file;
      EXPECT_EQ(df::gguf::type_name(mine->tensors[i].type), df::gguf::type_name(ref->tensors[i].type))
          << file << " " << ref->tensors[i].name;
      EXPECT_EQ(mine->tensors[i].shape, ref->tensors[i].shape) << file << " " << ref->tensors[i].name;
    }
    EXPECT_EQ(mine->get_u64_or("general.file_type", 0), ref->get_u64_or("general.file_type", 1)) << file;
  }
}

TEST(SynthMix, RowsThatDoNotFillABlockFallBack) {
  const df::synth::MixModel m{.n_layer = 8, .n_head = 8, .n_head_kv = 2, .n_expert = 0};
  using df::synth::Mix;
  using df::synth::mix_tensor_type;
  EXPECT_EQ(mix_tensor_type(Mix::kIQ4_XS, m, "blk.3.attn_q.weight", {96, 256}), GgmlType::IQ4_NL);
  EXPECT_EQ(mix_tensor_type(Mix::kQ4_K_M, m, "blk.3.attn_q.weight", {96, 256}), GgmlType::Q5_0);
  EXPECT_EQ(mix_tensor_type(Mix::kQ5_K_M, m, "blk.3.attn_q.weight", {96, 256}), GgmlType::Q5_1);
  EXPECT_EQ(mix_tensor_type(Mix::kQ6_K, m, "blk.3.attn_q.weight", {96, 256}), GgmlType::Q8_0);
  EXPECT_EQ(mix_tensor_type(Mix::kQ3_K_M, m, "blk.3.attn_q.weight", {96, 256}), GgmlType::Q4_0);
  EXPECT_EQ(mix_tensor_type(Mix::kQ4_K_M, m, "blk.3.attn_q.weight", {40, 256}), GgmlType::F16);
  EXPECT_EQ(mix_tensor_type(Mix::kQ4_K_M, m, "output.weight", {96, 1000}), GgmlType::Q8_0);
  // Q4_K_M's more-bits layers of 8: 0, 3, 6 and 7 (the first and last eighth, every third one between).
  for (int l = 0; l < 8; ++l) {
    const bool more = l == 0 || l == 3 || l == 6 || l == 7;
    EXPECT_EQ(mix_tensor_type(Mix::kQ4_K_M, m, "blk." + std::to_string(l) + ".ffn_down.weight", {1024, 256}),
              more ? GgmlType::Q6_K : GgmlType::Q4_K)
        << l;
  }
  // Grouped-query attention of 4 or more moves Q2_K's attn_v to Q4_K and IQ4_XS's to Q5_K.
  EXPECT_EQ(mix_tensor_type(Mix::kQ2_K, m, "blk.1.attn_v.weight", {256, 64}), GgmlType::Q4_K);
  EXPECT_EQ(mix_tensor_type(Mix::kIQ4_XS, m, "blk.1.attn_v.weight", {256, 64}), GgmlType::Q5_K);
  EXPECT_FALSE(df::synth::mix_from_name("q4_k_s").has_value());
  EXPECT_EQ(df::synth::mix_from_name("Q4_K_M"), Mix::kQ4_K_M);
}

TEST_F(SynthFile, AMixedFileRunsOnTheCpu) {
  DF_REQUIRE_SHARED(tok, "models/qwen3moe-q4_k_m.gguf");
  df::synth::Options o;
  o.shape = *df::synth::preset("qwen3moe", "tiny");
  o.shape.d_model = 256, o.shape.n_head = 4, o.shape.n_head_kv = 2, o.shape.head_dim = 64, o.shape.expert_ff = 256;
  o.mix = df::synth::Mix::kQ4_K_M;
  o.tokenizer_from = tok.string();
  o.out = (dir_ / "run.gguf").string();
  auto st = df::synth::write_model(o);
  ASSERT_TRUE(st.ok()) << st.error().message;
  auto model = df::engine::Model::open(o.out, {.n_ctx = 64, .threads = 2});
  ASSERT_TRUE(model.ok()) << model.error().message;
  df::engine::Session s = df::test::new_session(**model);
  const std::vector<int32_t> prompt = {1, 450, 4996, 3347};
  auto ev = s.eval(prompt);
  ASSERT_TRUE(ev.ok()) << ev.error().message;
  for (float l : s.logits()) ASSERT_TRUE(std::isfinite(l));
}

TEST_F(SynthFile, Qwen35MoeMatchesTheSharedModelsLayout) {
  // The shared qwen35moe-q8_0 model is the tiny shape at d=32 plus an MTP block (which synth does not write).
  DF_REQUIRE_SHARED(ref_path, "models/qwen35moe-q8_0.gguf");
  df::synth::Options o;
  o.shape = *df::synth::preset("qwen35moe", "tiny");
  o.shape.d_model = 32;
  o.type = GgmlType::Q8_0;
  o.tokenizer_from = ref_path.string();
  o.out = (dir_ / "q35.gguf").string();
  auto st = df::synth::write_model(o);
  ASSERT_TRUE(st.ok()) << st.error().message;
  auto mine = df::gguf::read_file(o.out);
  auto ref = df::gguf::read_file(ref_path.string());
  ASSERT_TRUE(mine.ok() && ref.ok());
  size_t main_tensors = 0;
  for (const auto& r : ref->tensors) {
    if (r.name.rfind("blk.8.", 0) == 0) continue;  // the MTP block
    ++main_tensors;
    const auto* t = mine->tensor(r.name);
    ASSERT_NE(t, nullptr) << "missing " << r.name;
    EXPECT_EQ(t->type, r.type) << r.name;
    EXPECT_EQ(t->shape, r.shape) << r.name;
  }
  EXPECT_EQ(mine->tensors.size(), main_tensors);
  for (const auto& kv : ref->metadata) {
    if (kv.key == "general.name" || kv.key == "qwen35moe.block_count" || kv.key == "qwen35moe.nextn_predict_layers")
      continue;
    const auto* v = mine->find(kv.key);
    ASSERT_NE(v, nullptr) << "missing key " << kv.key;
    EXPECT_TRUE(*v == kv.value) << kv.key << ": " << v->summary() << " vs " << kv.value.summary();
  }
  EXPECT_EQ(mine->get_u64_or("qwen35moe.block_count", 0), 8u);
  auto model = df::engine::Model::open(o.out, {.n_ctx = 64, .threads = 2});
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ((*model)->spec().n_recurrent(), 6u);
}

TEST_F(SynthFile, Qwen35MoeRunsAndPadsItsVocabulary) {
  DF_REQUIRE_SHARED(tok, "models/qwen35moe-q8_0.gguf");
  df::synth::Options o;
  o.shape = *df::synth::preset("qwen35moe", "tiny");
  o.shape.n_vocab = 152000;  // 64 rows more than the tokenizer's 151,936 tokens
  o.type = GgmlType::Q4_0;
  o.tokenizer_from = tok.string();
  o.out = (dir_ / "padded.gguf").string();
  auto st = df::synth::write_model(o);
  ASSERT_TRUE(st.ok()) << st.error().message;
  auto f = df::gguf::read_file(o.out);
  ASSERT_TRUE(f.ok());
  auto tokens = f->get_array("tokenizer.ggml.tokens");
  auto types = f->get_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(tokens.ok() && types.ok());
  ASSERT_EQ((*tokens)->items.size(), 152000u);
  ASSERT_EQ((*types)->items.size(), 152000u);
  EXPECT_EQ(*(*tokens)->items.back().str(), "[PAD151999]");
  EXPECT_EQ((*types)->items.back().to_i64(), 5);  // unused
  EXPECT_EQ(f->tensor("token_embd.weight")->shape[1], 152000u);
  auto model = df::engine::Model::open(o.out, {.n_ctx = 64, .threads = 2});
  ASSERT_TRUE(model.ok()) << model.error().message;
  df::engine::Session s = df::test::new_session(**model);
  auto ev = s.eval(std::vector<int32_t>{785, 3974, 13876, 38835});
  ASSERT_TRUE(ev.ok()) << ev.error().message;
  ASSERT_EQ(s.logits().size(), 152000u);
  for (float l : s.logits()) ASSERT_TRUE(std::isfinite(l));
}

TEST_F(SynthFile, Qwen35MoeTakesTheQuantizersMix) {
  DF_REQUIRE_SHARED(tok, "models/qwen35moe-q8_0.gguf");
  df::synth::Options o;
  o.shape = *df::synth::preset("qwen35moe", "tiny");
  o.shape.d_model = 256, o.shape.expert_ff = 256, o.shape.shared_ff = 256;  // rows that fill 256-blocks
  o.mix = df::synth::Mix::kQ4_K_M;
  o.tokenizer_from = tok.string();
  o.out = (dir_ / "mix.gguf").string();
  auto st = df::synth::write_model(o);
  ASSERT_TRUE(st.ok()) << st.error().message;
  auto f = df::gguf::read_file(o.out);
  ASSERT_TRUE(f.ok());
  auto type = [&](const std::string& name) { return f->tensor(name)->type; };
  // Of 8 layers, 0, 3, 6 and 7 take more bits; the DeltaNet layers' attn_qkv count as attn_v, and so does layer 3's.
  EXPECT_EQ(type("blk.0.attn_qkv.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type("blk.1.attn_qkv.weight"), GgmlType::Q4_K);
  EXPECT_EQ(type("blk.3.attn_v.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type("blk.7.attn_v.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type("blk.6.ffn_down_exps.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type("blk.6.ffn_down_shexp.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type("blk.5.ffn_down_exps.weight"), GgmlType::Q4_K);
  for (const char* name : {"blk.5.attn_gate.weight", "blk.5.ssm_alpha.weight", "blk.5.ssm_beta.weight",
                           "blk.5.ssm_out.weight", "blk.3.attn_q.weight", "blk.3.attn_k.weight",
                           "blk.3.attn_output.weight", "blk.5.ffn_gate_exps.weight", "blk.5.ffn_up_shexp.weight",
                           "token_embd.weight"})
    EXPECT_EQ(type(name), GgmlType::Q4_K) << name;
  EXPECT_EQ(type("blk.5.ssm_conv1d.weight"), GgmlType::F32);
  EXPECT_EQ(type("output.weight"), GgmlType::Q6_K);
  EXPECT_EQ(f->get_u64_or("general.file_type", 0), uint64_t(df::synth::Mix::kQ4_K_M));
  auto model = df::engine::Model::open(o.out, {.n_ctx = 64, .threads = 2});
  ASSERT_TRUE(model.ok()) << model.error().message;
  df::engine::Session s = df::test::new_session(**model);
  ASSERT_TRUE(s.eval(std::vector<int32_t>{785, 3974, 13876, 38835}).ok());
  for (float l : s.logits()) ASSERT_TRUE(std::isfinite(l));
}

TEST(SynthPresets, Qwen36_35B_A3B_HasTheRealShape) {
  auto s = df::synth::preset("qwen35moe", "qwen3.6-35b-a3b");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->n_layer, 40u);
  EXPECT_EQ(s->d_model, 2048u);
  EXPECT_EQ(s->n_head, 16u);
  EXPECT_EQ(s->n_head_kv, 2u);
  EXPECT_EQ(s->head_dim, 256u);
  EXPECT_EQ(s->n_rot, 64u);
  EXPECT_EQ(s->ssm_k_heads, 16u);
  EXPECT_EQ(s->ssm_v_heads, 32u);
  EXPECT_EQ(s->ssm_state, 128u);
  EXPECT_EQ(s->ssm_conv, 4u);
  EXPECT_EQ(s->n_expert, 256u);
  EXPECT_EQ(s->n_expert_used, 8u);
  EXPECT_EQ(s->expert_ff, 512u);
  EXPECT_EQ(s->shared_ff, 512u);
  EXPECT_EQ(s->full_attention_interval, 4u);
  EXPECT_EQ(s->n_vocab, 248320u);
  // One expert record in Q8_0: 3 matrices of 2048 x 512 at 34 bytes per 32 weights = 3.19 MiB.
  EXPECT_EQ(3ull * 2048 * 512 / 32 * 34, 3342336ull);
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
