// Greedy completions against llama.cpp's CPU backend (../shared/models/*.gold.json): robust cases byte for byte
// (stable ones for the K-quant files), the others report their common prefix; the same tokens streamed from the GGUF
// under the smallest RAM budget, and from a store made by ingest.
#include <gtest/gtest.h>

#include "model/gold.h"
#include "diskformer/store/ingest.h"
#include "support/sessions.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

// Runs every case of a shared model; `bar` picks the cases that must match llama.cpp byte for byte.
void check_gold(const std::string& name, bool GoldCase::*bar, const char* bar_name) {
  DF_REQUIRE_SHARED(model_path, "models/" + name + ".gguf");
  const auto cases = read_gold((shared_dir() / "models" / (name + ".gold.json")).string());
  auto model = engine::Model::open(model_path.string(), {.n_ctx = 512, .threads = 2});
  ASSERT_TRUE(model.ok()) << model.error().message;
  // The same model streaming from disk under the smallest RAM budget its plan accepts: experts through a pool
  // of 2 x top-k slots, or layers through 2 slots, beside the KV cache and work buffers.
  const auto& full_plan = (*model)->plan();
  auto probe = engine::Model::open(model_path.string(), {.n_ctx = 512, .threads = 1, .ram_budget = full_plan.total_bytes()});
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  const uint64_t least = (*probe)->plan().min_budget();
  auto streamed = engine::Model::open(model_path.string(), {.n_ctx = 512, .threads = 2, .ram_budget = least});
  ASSERT_TRUE(streamed.ok()) << streamed.error().message;
  ASSERT_NE((*streamed)->plan().mode, engine::Residency::kAllResident);
  // A store of the model, streamed at the same budget: one read per record, the same records.
  const auto store = temp_dir("gold_store_" + name);
  auto ingested = store::ingest({.source = model_path.string(), .dir = store.string(), .force = true});
  ASSERT_TRUE(ingested.ok()) << ingested.error().message;
  auto from_store = engine::Model::open(store.string(), {.n_ctx = 512, .threads = 2, .ram_budget = least});
  ASSERT_TRUE(from_store.ok()) << from_store.error().message;
  ASSERT_TRUE((*from_store)->files().from_store);

  PieceDecoder pieces((*model)->file());
  for (const auto& c : cases) {
    engine::Session s = new_session(**model), t = new_session(**streamed), u = new_session(**from_store);
    const auto ids = greedy(s, c.prompt_ids, c.n_predict);
    std::string text;
    for (int32_t id : ids) text += pieces.piece(id);
    const size_t common = common_prefix(text, c.completion);
    std::printf("[gold] %-16s %s=%d common prefix %zu/%zu bytes  prompt \"%s\"\n", name.c_str(), bar_name, c.*bar,
                common, c.completion.size(), c.prompt.substr(0, 40).c_str());
    if (c.*bar) {
      EXPECT_EQ(text, c.completion) << name << " prompt: " << c.prompt;
    }
    EXPECT_EQ(greedy(t, c.prompt_ids, c.n_predict), ids) << name << " under a " << least << "-byte budget";
    EXPECT_EQ(greedy(u, c.prompt_ids, c.n_predict), ids) << name << " from a store under a " << least << "-byte budget";
  }
  for (auto* m : {&*streamed, &*from_store}) {
    const engine::ModelStats st = (*m)->stats();
    ASSERT_TRUE(st.ram.has_value());
    EXPECT_GT(st.ram->cache.misses, 0u);
  }
}

class Gold : public ::testing::TestWithParam<const char*> {};

TEST_P(Gold, GreedyMatchesLlamaCpp) { check_gold(GetParam(), &GoldCase::robust, "robust"); }

// The K-quant and IQ4 files: llama.cpp's CPU backend made their gold on x86 with AVX2 (its AVX-512 build rounds
// some products differently), and every case where its two prefills agree must match on the CPU.
class GoldStable : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldStable, GreedyMatchesLlamaCpp) { check_gold(GetParam(), &GoldCase::stable, "stable"); }

INSTANTIATE_TEST_SUITE_P(KQuantModels, GoldStable,
                         ::testing::Values("qwen3-q6_k", "qwen3-q2_k", "qwen3moe-q4_k_m", "qwen3moe-q3_k_m",
                                           "qwen3moe-iq4_xs", "mixtral-q5_k_m"),
                         model_param_name);

INSTANTIATE_TEST_SUITE_P(Models, Gold,
                         ::testing::Values("qwen3moe-q4_0", "qwen3moe-q8_0", "qwen3-q4_0", "llama-f16", "mixtral-q4_0"),
                         model_param_name);

}  // namespace
}  // namespace df::test
