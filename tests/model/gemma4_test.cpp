// gemma4's spec and tensors from the shared files' metadata (../shared/docs/ARCHS.md lists what they hold), the
// errors of inconsistent metadata, and an expert record of the fused gate_up layout.
#include <gtest/gtest.h>

#include <algorithm>

#include "diskformer/gguf/reader.h"
#include "diskformer/model/gemma4.h"
#include "diskformer/model/records.h"
#include "diskformer/store/record.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

gguf::File read(const std::filesystem::path& p) {
  auto f = gguf::read_file(p.string());
  EXPECT_TRUE(f.ok()) << f.error().message;
  return std::move(f).value();
}

void set(gguf::File& f, const std::string& key, gguf::Value v) {
  auto it = std::find_if(f.metadata.begin(), f.metadata.end(), [&](const auto& kv) { return kv.key == key; });
  if (it == f.metadata.end()) {
    f.metadata.push_back({key, std::move(v), 0});
  } else {
    it->value = std::move(v);
  }
  f.reindex();
}

void erase(gguf::File& f, const std::string& key) {
  std::erase_if(f.metadata, [&](const auto& kv) { return kv.key == key; });
  f.reindex();
}

TEST(Gemma4Spec, TheMoeLayout) {
  DF_REQUIRE_SHARED(path, "models/gemma4-moe-q8_0.gguf");
  const gguf::File f = read(path);
  auto r = model::spec_from_gguf(f);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const model::ModelSpec& s = *r;
  EXPECT_EQ(s.family, model::Family::kGemma4);
  EXPECT_EQ(s.n_layer, 6u);
  EXPECT_EQ(s.n_embd, 128u);
  EXPECT_EQ(s.sliding_window, 64u);
  EXPECT_EQ(s.final_logit_softcap, 30.0f);
  EXPECT_EQ(s.n_embd_per_layer, 0u);
  EXPECT_EQ(s.n_expert, 16u);
  EXPECT_EQ(s.n_expert_used, 8u);
  EXPECT_EQ(s.n_ff_expert, 32u);
  ASSERT_EQ(s.layers.size(), 6u);
  for (uint32_t il = 0; il < 6; ++il) {
    const model::LayerSpec& l = s.layers[il];
    const bool full = il == 5;
    EXPECT_EQ(l.sliding, !full) << il;
    EXPECT_EQ(l.n_head, 2u);
    EXPECT_EQ(l.n_head_kv, full ? 1u : 2u) << il;
    EXPECT_EQ(l.head_dim_k, full ? 512u : 256u) << il;
    EXPECT_EQ(l.n_rot, full ? 512u : 256u) << il;
    EXPECT_EQ(l.rope_base, full ? 1e6f : 1e4f) << il;
    EXPECT_EQ(l.n_ff, 96u);
    EXPECT_EQ(l.kv_layer, il);
  }
  auto t = model::bind_tensors(f, s);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->output, t->token_embd);  // tied
  ASSERT_NE(t->rope_freqs, nullptr);
  EXPECT_EQ(t->ple_table, nullptr);
  EXPECT_EQ(t->layers[5].wv, nullptr);  // K doubles as V in the full layer
  EXPECT_NE(t->layers[4].wv, nullptr);
  for (const auto& l : t->layers) {
    EXPECT_TRUE(l.moe());
    EXPECT_NE(l.gate_up_exps, nullptr);
    EXPECT_EQ(l.gate_exps, nullptr);
    EXPECT_NE(l.down_exps_scale, nullptr);
    EXPECT_NE(l.router_scale, nullptr);
    EXPECT_NE(l.ffn_gate, nullptr);  // the dense MLP beside the experts
  }

  // An expert record: the fused gate_up slice (gate rows, then up rows), then down; the per-expert scale stays with
  // the layer's dense tensors.
  auto map = store::RecordMap::in_place(f);
  ASSERT_TRUE(map.ok()) << map.error().message;
  auto lay = model::record_layouts(s, *t, *map);
  ASSERT_TRUE(lay.ok()) << lay.error().message;
  const model::ExpertLayout& x = lay->experts[0];
  EXPECT_EQ(x.gate.rows, 32);
  EXPECT_EQ(x.up.rows, 32);
  EXPECT_EQ(x.gate.cols, 128);
  EXPECT_EQ(x.gate_at, 0u);
  EXPECT_EQ(x.up_at, 32 * x.gate.row_bytes);
  EXPECT_EQ(x.down_at, 64 * x.gate.row_bytes);
  EXPECT_EQ(x.record_bytes, 64 * x.gate.row_bytes + x.down.bytes());
  const store::LayerRecord* lr = map->layer(0);
  ASSERT_NE(lr, nullptr);
  EXPECT_TRUE(std::any_of(lr->tensors.begin(), lr->tensors.end(),
                          [](const auto& i) { return i.name == "blk.0.ffn_down_exps.scale"; }));
  std::vector<store::RecordPart> parts;
  ASSERT_TRUE(map->parts({store::RecordKind::kExpert, 2, 3}, parts).ok());
  ASSERT_EQ(parts.size(), 2u);
  const gguf::TensorInfo* gu = f.tensor("blk.2.ffn_gate_up_exps.weight");
  EXPECT_EQ(parts[0].file_offset, gu->offset + 3 * gu->n_bytes / 16);
  EXPECT_EQ(parts[0].slot_offset, 0u);
  EXPECT_EQ(parts[1].slot_offset, x.down_at);
}

TEST(Gemma4Spec, TheE2bLayout) {
  DF_REQUIRE_SHARED(path, "models/gemma4-e2b-q8_0.gguf");
  const gguf::File f = read(path);
  auto r = model::spec_from_gguf(f);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const model::ModelSpec& s = *r;
  EXPECT_EQ(s.n_layer, 10u);
  EXPECT_EQ(s.n_embd_per_layer, 16u);
  EXPECT_EQ(s.sliding_window, 32u);
  EXPECT_FALSE(s.moe());
  for (uint32_t il = 0; il < 10; ++il) {
    const model::LayerSpec& l = s.layers[il];
    EXPECT_EQ(l.sliding, il != 4 && il != 9) << il;
    EXPECT_EQ(l.n_ff, il < 5 ? 128u : 256u) << il;
    // Layers 5-9 share: the sliding ones layer 3's KV, the full one layer 4's.
    EXPECT_EQ(l.kv_layer, il < 5 ? il : il == 9 ? 4u : 3u) << il;
  }
  auto t = model::bind_tensors(f, s);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_NE(t->ple_table, nullptr);
  EXPECT_NE(t->ple_model_proj, nullptr);
  EXPECT_NE(t->ple_proj_norm, nullptr);
  for (uint32_t il = 0; il < 10; ++il) {
    const auto& l = t->layers[il];
    EXPECT_EQ(l.wk != nullptr, il < 5) << il;
    EXPECT_EQ(l.wv != nullptr, il < 5) << il;
    EXPECT_NE(l.ple_gate, nullptr);
    EXPECT_NE(l.ple_proj, nullptr);
    EXPECT_FALSE(l.moe());
  }
}

TEST(Gemma4Spec, InconsistentMetadataIsRefusedNamingTheKey) {
  DF_REQUIRE_SHARED(path, "models/gemma4-e2b-q8_0.gguf");
  const gguf::File base = read(path);
  auto refused = [](const gguf::File& f, const std::string& want) {
    auto r = model::spec_from_gguf(f);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(f.path), std::string::npos) << r.error().message;
  };
  gguf::File f = base;
  erase(f, "gemma4.attention.sliding_window");
  refused(f, "gemma4.attention.sliding_window");
  f = base;
  set(f, "gemma4.feed_forward_length",
      gguf::Value::array(gguf::ValueType::U32, {gguf::Value::u32(128), gguf::Value::u32(128)}));
  refused(f, "has 2 entries, the model 10 layers");
  f = base;
  // Six shared layers: the full one would read layer 3, a sliding layer.
  set(f, "gemma4.attention.shared_kv_layers", gguf::Value::u32(6));
  refused(f, "would share the KV of layer 3");
  f = base;
  set(f, "gemma4.attention.key_length_swa", gguf::Value::u32(128));
  refused(f, "key_length_swa = 128 and value_length_swa = 256 must be equal");
  // A missing tensor names itself.
  f = base;
  std::erase_if(f.tensors, [](const auto& t) { return t.name == "blk.7.inp_gate.weight"; });
  f.reindex();
  auto s = model::spec_from_gguf(f);
  ASSERT_TRUE(s.ok());
  auto t = model::bind_tensors(f, *s);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("blk.7.inp_gate.weight is missing"), std::string::npos) << t.error().message;
}

}  // namespace
}  // namespace df::test
