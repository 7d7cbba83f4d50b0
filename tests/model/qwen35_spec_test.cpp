// qwen35moe's spec and tensor binding from the shared file's header, and the errors of headers that break them:
// each names the file and the key or tensor.
#include <gtest/gtest.h>

#include <algorithm>

#include "diskformer/gguf/reader.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

constexpr const char* kModel = "models/qwen35moe-q8_0.gguf";

void set_key(gguf::File& f, const std::string& key, gguf::Value v) {
  auto it = std::find_if(f.metadata.begin(), f.metadata.end(), [&](const gguf::KeyValue& kv) { return kv.key == key; });
  if (it == f.metadata.end()) {
    f.metadata.push_back({key, std::move(v)});
  } else {
    it->value = std::move(v);
  }
  f.reindex();
}

void drop_key(gguf::File& f, const std::string& key) {
  std::erase_if(f.metadata, [&](const gguf::KeyValue& kv) { return kv.key == key; });
  f.reindex();
}

std::string spec_error(const gguf::File& f) {
  auto s = model::spec_from_gguf(f);
  EXPECT_FALSE(s.ok());
  return s.ok() ? "" : s.error().message;
}

TEST(Qwen35Spec, ReadsTheHybridLayout) {
  DF_REQUIRE_SHARED(path, kModel);
  auto f = gguf::read_file(path.string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto s = model::spec_from_gguf(*f);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->family, model::Family::kQwen35Moe);
  EXPECT_EQ(s->n_layer, 8u);
  EXPECT_EQ(s->n_layer_nextn, 1u);
  EXPECT_EQ(s->recurrent, (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_EQ(s->n_kv_layers(), 2u);
  EXPECT_EQ(s->delta_net.conv_kernel, 4u);
  EXPECT_EQ(s->delta_net.head_dim, 128u);
  EXPECT_EQ(s->delta_net.n_k_heads, 2u);
  EXPECT_EQ(s->delta_net.n_v_heads, 4u);
  EXPECT_EQ(s->delta_net.conv_dim(), 1024u);
  EXPECT_TRUE(s->attn_gate);
  EXPECT_TRUE(s->qk_norm);
  EXPECT_EQ(s->rope_style, model::RopeStyle::kNeox);
  EXPECT_EQ(s->n_rot, 64u);
  EXPECT_EQ(s->head_dim_k, 256u);
  EXPECT_EQ(s->n_ff_shared, 32u);
  auto t = model::bind_tensors(*f, *s);
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_EQ(t->layers.size(), 8u);  // the MTP block (blk.8) is not bound
  EXPECT_NE(t->layers[0].ssm_qkv, nullptr);
  EXPECT_EQ(t->layers[0].wq, nullptr);
  EXPECT_NE(t->layers[3].wq, nullptr);
  EXPECT_EQ(t->layers[3].ssm_qkv, nullptr);
  EXPECT_EQ(t->layers[3].wq->shape[1], 2u * 2 * 256);  // each head's query and gate
  EXPECT_EQ(t->layers[5].ffn_norm->name, "blk.5.post_attention_norm.weight");
  EXPECT_NE(t->layers[7].gate_inp_shexp, nullptr);
}

TEST(Qwen35Spec, RecurrentLayersMayBeListed) {
  DF_REQUIRE_SHARED(path, kModel);
  auto f = gguf::read_file(path.string());
  ASSERT_TRUE(f.ok());
  std::vector<gguf::Value> flags;
  for (bool b : {true, false, true, true, true, true, true, false, false}) flags.push_back(gguf::Value::boolean(b));
  set_key(*f, "qwen35moe.attention.recurrent_layers", gguf::Value::array(gguf::ValueType::BOOL, flags));
  auto s = model::spec_from_gguf(*f);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->recurrent, (std::vector<bool>{true, false, true, true, true, true, true, false}));
  // Layer 1 is now an attention layer and the file has DeltaNet tensors there: the binding says which is missing.
  auto t = model::bind_tensors(*f, *s);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("tensor blk.1.attn_q.weight is missing"), std::string::npos) << t.error().message;
}

TEST(Qwen35Spec, BrokenHeadersNameTheKey) {
  DF_REQUIRE_SHARED(path, kModel);
  auto base = gguf::read_file(path.string());
  ASSERT_TRUE(base.ok());
  {
    gguf::File f = *base;
    drop_key(f, "qwen35moe.ssm.state_size");
    const std::string e = spec_error(f);
    EXPECT_NE(e.find(path.string()), std::string::npos) << e;
    EXPECT_NE(e.find("qwen35moe.ssm.state_size"), std::string::npos) << e;
  }
  {
    gguf::File f = *base;
    set_key(f, "qwen35moe.ssm.time_step_rank", gguf::Value::u32(3));
    EXPECT_NE(spec_error(f).find("not a multiple of ssm.group_count"), std::string::npos);
  }
  {
    gguf::File f = *base;
    set_key(f, "qwen35moe.ssm.inner_size", gguf::Value::u32(256));
    EXPECT_NE(spec_error(f).find("ssm.inner_size = 256"), std::string::npos);
  }
  {
    gguf::File f = *base;
    std::vector<gguf::Value> sections;
    for (int32_t x : {11, 11, 5, 0}) sections.push_back(gguf::Value::i32(x));  // w covers pairs 2, 5, .., 14 only
    set_key(f, "qwen35moe.rope.dimension_sections", gguf::Value::array(gguf::ValueType::I32, sections));
    EXPECT_NE(spec_error(f).find("rotary pair 17"), std::string::npos);
  }
  {
    gguf::File f = *base;
    set_key(f, "qwen35moe.nextn_predict_layers", gguf::Value::u32(9));
    EXPECT_NE(spec_error(f).find("leaves no main layers"), std::string::npos);
  }
}

TEST(Qwen35Spec, AMissingDeltaNetTensorIsNamed) {
  DF_REQUIRE_SHARED(path, kModel);
  auto f = gguf::read_file(path.string());
  ASSERT_TRUE(f.ok());
  auto s = model::spec_from_gguf(*f);
  ASSERT_TRUE(s.ok());
  std::erase_if(f->tensors, [](const gguf::TensorInfo& t) { return t.name == "blk.2.ssm_a"; });
  f->reindex();
  auto t = model::bind_tensors(*f, *s);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("tensor blk.2.ssm_a is missing"), std::string::npos) << t.error().message;
}

}  // namespace
}  // namespace df::test
