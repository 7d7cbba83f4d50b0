// A small raw float32 export through convert_raw: the GGUF's metadata, tensor types and shapes, values within the
// quantizers' error, the engine loads and runs it; and the refusals of a broken export.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "diskformer/convert/quantize.h"
#include "diskformer/convert/raw_model.h"
#include "diskformer/engine/model.h"
#include "support/sessions.h"
#include "diskformer/gguf/reader.h"
#include "support/test_paths.h"

namespace df::convert {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint32_t kVocab = 32000, kEmbd = 32, kExperts = 2, kFf = 32;

struct RawDir {
  fs::path dir;
  json manifest;
  std::map<std::string, std::vector<float>> values;
};

// Deterministic values around zero (scale s), norms around one.
std::vector<float> pattern(uint64_t n, float s, uint32_t seed) {
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = (float(seed >> 8) / 16777216.0f - 0.5f) * 2.0f * s;
  }
  return v;
}

RawDir make_raw(const std::string& name) {
  RawDir r;
  r.dir = df::test::temp_dir(name);
  r.manifest = {{"arch", "qwen3moe"},
                {"name", "convert test"},
                {"hparams",
                 {{"n_layer", 1}, {"n_embd", kEmbd}, {"n_head", 1}, {"n_head_kv", 1}, {"head_dim", 32}, {"n_ff", 64},
                  {"n_expert", kExperts}, {"n_expert_used", 1}, {"n_ff_expert", kFf}, {"context_length", 256},
                  {"rope_freq_base", 1e6}, {"rms_eps", 1e-6}}},
                {"tensors", json::array()}};
  uint32_t seed = 1;
  auto add = [&](const std::string& tname, std::vector<uint64_t> shape, bool norm) {
    uint64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v = pattern(n, norm ? 0.1f : 0.5f, seed++);
    if (norm)
      for (float& x : v) x += 1.0f;
    std::ofstream(r.dir / (tname + ".f32"), std::ios::binary).write(reinterpret_cast<const char*>(v.data()),
                                                                   std::streamsize(n * 4));
    r.manifest["tensors"].push_back({{"name", tname}, {"file", tname + ".f32"}, {"shape", shape}});
    r.values[tname] = std::move(v);
  };
  add("token_embd.weight", {kVocab, kEmbd}, false);
  add("blk.0.attn_norm.weight", {kEmbd}, true);
  add("blk.0.attn_q.weight", {32, kEmbd}, false);
  add("blk.0.attn_k.weight", {32, kEmbd}, false);
  add("blk.0.attn_v.weight", {32, kEmbd}, false);
  add("blk.0.attn_output.weight", {kEmbd, 32}, false);
  add("blk.0.attn_q_norm.weight", {32}, true);
  add("blk.0.attn_k_norm.weight", {32}, true);
  add("blk.0.ffn_norm.weight", {kEmbd}, true);
  add("blk.0.ffn_gate_inp.weight", {kExperts, kEmbd}, false);
  add("blk.0.ffn_gate_exps.weight", {kExperts, kFf, kEmbd}, false);
  add("blk.0.ffn_up_exps.weight", {kExperts, kFf, kEmbd}, false);
  add("blk.0.ffn_down_exps.weight", {kExperts, kEmbd, kFf}, false);
  add("output_norm.weight", {kEmbd}, true);
  std::ofstream(r.dir / "manifest.json") << r.manifest.dump(1);
  return r;
}

std::vector<float> read_values(const gguf::File& f, const gguf::TensorInfo& t) {
  std::vector<uint8_t> bytes(t.n_bytes);
  std::ifstream in(f.path, std::ios::binary);
  in.seekg(std::streamoff(t.offset));
  in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
  std::vector<float> v(t.n_elements);
  switch (t.type) {
    case gguf::GgmlType::F32: std::memcpy(v.data(), bytes.data(), bytes.size()); break;
    case gguf::GgmlType::Q8_0: dequantize_q8_0(bytes.data(), int64_t(v.size()), v.data()); break;
    case gguf::GgmlType::Q4_0: dequantize_q4_0(bytes.data(), int64_t(v.size()), v.data()); break;
    default: ADD_FAILURE() << "unexpected type";
  }
  return v;
}

TEST(ConvertRaw, RoundTripQ8_0) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  RawDir raw = make_raw("convert_q8");
  const std::string out = (raw.dir / "out.gguf").string();
  Status st = convert_raw({.raw_dir = raw.dir.string(), .tokenizer_from = vocab.string(),
                           .type = gguf::GgmlType::Q8_0, .out = out});
  ASSERT_TRUE(st.ok()) << st.error().message;
  auto f = gguf::read_file(out);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->architecture(), "qwen3moe");
  EXPECT_EQ(f->get_u64_or("qwen3moe.expert_feed_forward_length", 0), kFf);
  EXPECT_EQ(f->get_u64_or("qwen3moe.expert_count", 0), kExperts);
  EXPECT_EQ(f->get_u64_or("qwen3moe.attention.key_length", 0), 32u);
  EXPECT_EQ(f->get_u64_or("general.file_type", 99), 7u);
  EXPECT_FLOAT_EQ(float(f->get_f64_or("qwen3moe.rope.freq_base", 0)), 1e6f);
  auto toks = f->get_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks.ok());
  EXPECT_EQ((*toks)->items.size(), kVocab);
  EXPECT_EQ(f->tensors.size(), raw.values.size());
  EXPECT_EQ(f->tensor("output.weight"), nullptr);  // tied head

  for (const auto& [name, orig] : raw.values) {
    const gguf::TensorInfo* t = f->tensor(name);
    ASSERT_NE(t, nullptr) << name;
    const bool f32 = name.find("norm") != std::string::npos || name.find("gate_inp") != std::string::npos;
    EXPECT_EQ(t->type, f32 ? gguf::GgmlType::F32 : gguf::GgmlType::Q8_0) << name;
    const auto& shape = raw.manifest["tensors"];
    for (const auto& m : shape)
      if (m["name"] == name) {
        std::vector<uint64_t> want = m["shape"].get<std::vector<uint64_t>>();
        EXPECT_EQ(t->shape, std::vector<uint64_t>(want.rbegin(), want.rend())) << name;
      }
    const std::vector<float> v = read_values(*f, *t);
    ASSERT_EQ(v.size(), orig.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (f32) {
        ASSERT_EQ(v[i], orig[i]) << name << " " << i;
      } else {
        float amax = 0;
        for (size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(orig[j]));
        ASSERT_LE(std::fabs(v[i] - orig[i]), 0.57f * amax / 127.0f + 1e-7f) << name << " " << i;
      }
    }
  }

  // The engine accepts the file: every key and tensor llama.cpp's qwen3moe loader needs is there.
  auto model = engine::Model::open(out, {.threads = 1});
  ASSERT_TRUE(model.ok()) << model.error().message;
  engine::Session s = test::new_session(**model);
  const std::vector<int32_t> prompt{1, 512, 278, 6763};
  ASSERT_TRUE(s.eval(prompt).ok());
  ASSERT_EQ(s.logits().size(), kVocab);
  for (float l : s.logits()) ASSERT_TRUE(std::isfinite(l));
}

TEST(ConvertRaw, Q4_0KeepsRoutersAndNormsF32) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  RawDir raw = make_raw("convert_q4");
  const std::string out = (raw.dir / "out.gguf").string();
  ASSERT_TRUE(convert_raw({.raw_dir = raw.dir.string(), .tokenizer_from = vocab.string(),
                           .type = gguf::GgmlType::Q4_0, .out = out})
                  .ok());
  auto f = gguf::read_file(out);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->tensor("blk.0.ffn_down_exps.weight")->type, gguf::GgmlType::Q4_0);
  EXPECT_EQ(f->tensor("blk.0.ffn_gate_inp.weight")->type, gguf::GgmlType::F32);
  EXPECT_EQ(f->tensor("blk.0.attn_q_norm.weight")->type, gguf::GgmlType::F32);
  EXPECT_EQ(f->get_u64_or("general.file_type", 99), 2u);
  // The bytes are exactly the reference quantizer's.
  const auto& orig = raw.values["blk.0.attn_q.weight"];
  std::vector<uint8_t> want(orig.size() / 32 * 18), got(want.size());
  quantize_q4_0(orig.data(), int64_t(orig.size()), want.data());
  const gguf::TensorInfo* t = f->tensor("blk.0.attn_q.weight");
  std::ifstream in(out, std::ios::binary);
  in.seekg(std::streamoff(t->offset));
  in.read(reinterpret_cast<char*>(got.data()), std::streamsize(got.size()));
  EXPECT_EQ(got, want);
}

void expect_refused(const RawDir& raw, const std::string& vocab, const std::string& needle) {
  const std::string out = (raw.dir / "refused.gguf").string();
  Status st = convert_raw(
      {.raw_dir = raw.dir.string(), .tokenizer_from = vocab, .type = gguf::GgmlType::Q8_0, .out = out});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find(needle), std::string::npos) << st.error().message;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".partial"));
}

TEST(ConvertRaw, Refusals) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  {  // a tensor file shorter than its shape
    RawDir raw = make_raw("convert_short");
    fs::resize_file(raw.dir / "blk.0.attn_k.weight.f32", 100);
    expect_refused(raw, vocab.string(), "blk.0.attn_k.weight.f32: 100 bytes");
  }
  {  // a missing hyperparameter
    RawDir raw = make_raw("convert_hparam");
    raw.manifest["hparams"].erase("n_expert_used");
    std::ofstream(raw.dir / "manifest.json") << raw.manifest.dump();
    expect_refused(raw, vocab.string(), "hparams.n_expert_used");
  }
  {  // rows that are not whole quantization blocks
    RawDir raw = make_raw("convert_block");
    raw.manifest["tensors"][2]["shape"] = {64, 16};
    std::ofstream(raw.dir / "manifest.json") << raw.manifest.dump();
    expect_refused(raw, vocab.string(), "not a multiple of the q8_0 block of 32");
  }
  {  // an embedding table of another vocabulary
    RawDir raw = make_raw("convert_vocab");
    raw.manifest["tensors"][0]["shape"] = {16000, 64};
    std::ofstream(raw.dir / "manifest.json") << raw.manifest.dump();
    expect_refused(raw, vocab.string(), "vocabulary of 32000");
  }
  {  // no manifest at all
    RawDir raw = make_raw("convert_nomanifest");
    fs::remove(raw.dir / "manifest.json");
    expect_refused(raw, vocab.string(), "manifest.json");
  }
}

}  // namespace
}  // namespace df::convert
