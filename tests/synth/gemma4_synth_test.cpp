// synth --arch gemma4: the presets' shapes are Gemma 4's published ones, and the small ones write files the engine
// runs as gemma4, resident, streamed under the smallest budget and from a store, with the same tokens.
#include <gtest/gtest.h>

#include "diskformer/engine/model.h"
#include "diskformer/sampling/sampler.h"
#include "diskformer/store/ingest.h"
#include "diskformer/synth/synth.h"
#include "support/sessions.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

TEST(Gemma4Synth, PresetsAreThePublishedShapes) {
  auto a = synth::preset("gemma4", "26b-a4b");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->n_layer, 30u);
  EXPECT_EQ(a->d_model, 2816u);
  EXPECT_EQ(a->n_head, 16u);
  EXPECT_EQ(a->n_head_kv, 8u);
  EXPECT_EQ(a->gemma4.n_head_kv_full, 2u);
  EXPECT_EQ(a->head_dim, 256u);
  EXPECT_EQ(a->gemma4.head_dim_full, 512u);
  EXPECT_EQ(a->gemma4.period, 6u);
  EXPECT_EQ(a->gemma4.window, 1024u);
  EXPECT_EQ(a->ff, 2112u);
  EXPECT_EQ(a->n_expert, 128u);
  EXPECT_EQ(a->n_expert_used, 8u);
  EXPECT_EQ(a->expert_ff, 704u);
  EXPECT_TRUE(a->gemma4.full_k_is_v);
  auto e = synth::preset("gemma4", "e2b");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->n_layer, 35u);
  EXPECT_EQ(e->d_model, 1536u);
  EXPECT_EQ(e->n_head, 8u);
  EXPECT_EQ(e->n_head_kv, 1u);
  EXPECT_EQ(e->gemma4.period, 5u);
  EXPECT_EQ(e->gemma4.window, 512u);
  EXPECT_EQ(e->ff, 6144u);
  EXPECT_EQ(e->gemma4.ff_shared, 12288u);
  EXPECT_EQ(e->gemma4.n_kv_shared, 20u);
  EXPECT_EQ(e->gemma4.ple, 256u);
  EXPECT_EQ(e->n_expert, 0u);
}

class Gemma4SynthFile : public ::testing::TestWithParam<const char*> {};

TEST_P(Gemma4SynthFile, RunsResidentStreamedAndFromAStore) {
  DF_REQUIRE_SHARED(tok, "vocab/ggml-vocab-llama-spm.gguf");
  const auto dir = temp_dir(std::string("gemma4_synth_") + GetParam());
  synth::Options o;
  o.shape = *synth::preset("gemma4", GetParam());
  o.type = gguf::GgmlType::Q4_0;
  o.tokenizer_from = tok.string();
  o.out = (dir / "m.gguf").string();
  o.threads = 2;
  ASSERT_TRUE(synth::write_model(o).ok());

  auto m = engine::Model::open(o.out, {.n_ctx = 128, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const model::ModelSpec& s = (*m)->spec();
  EXPECT_EQ(s.family, model::Family::kGemma4);
  EXPECT_EQ(s.n_layer, o.shape.n_layer);
  EXPECT_EQ(s.n_embd_per_layer, o.shape.gemma4.ple);
  EXPECT_EQ(s.moe(), o.shape.n_expert > 0);
  for (uint32_t il = 0; il < s.n_layer; ++il)
    EXPECT_EQ(s.layers[il].sliding, il % o.shape.gemma4.period != o.shape.gemma4.period - 1) << il;

  const std::vector<int32_t> prompt = {1, 15043, 3186, 29892, 920, 526, 366};
  engine::Session a = new_session(**m);
  const auto want = greedy_ids(a, prompt, 12);
  auto probe = engine::Model::open(o.out, {.n_ctx = 128, .threads = 1, .ram_budget = 4 * (*m)->plan().model_bytes});
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  const uint64_t least = (*probe)->plan().min_budget();
  auto streamed = engine::Model::open(o.out, {.n_ctx = 128, .threads = 2, .ram_budget = least});
  ASSERT_TRUE(streamed.ok()) << streamed.error().message;
  engine::Session b = new_session(**streamed);
  EXPECT_EQ(greedy_ids(b, prompt, 12), want);
  const auto store = dir / "store";
  ASSERT_TRUE(store::ingest({.source = o.out, .dir = store.string(), .force = true}).ok());
  auto from_store = engine::Model::open(store.string(), {.n_ctx = 128, .threads = 2, .ram_budget = least});
  ASSERT_TRUE(from_store.ok()) << from_store.error().message;
  engine::Session c = new_session(**from_store);
  EXPECT_EQ(greedy_ids(c, prompt, 12), want);
}

INSTANTIATE_TEST_SUITE_P(Presets, Gemma4SynthFile, ::testing::Values("tiny", "tiny-e2b"),
                         [](const auto& info) { return info.param == std::string("tiny") ? std::string("tiny") : std::string("tiny_e2b"); });

}  // namespace
}  // namespace df::test
