// Greedy completions against llama.cpp's CPU backend (../shared/models/*.gold.json): robust cases byte for byte
// (every case of the files llama.cpp's AVX2 build made), the others report their common prefix; the same tokens
// streamed from the GGUF under the smallest RAM budget, and from a store made by ingest. The split copy of qwen3-q4_0
// (three files made by llama.cpp's gguf-split) gives every case's tokens exactly as the single file does, in each of
// those three ways.
#include <gtest/gtest.h>

#include "model/gold.h"
#include "diskformer/store/ingest.h"
#include "support/sessions.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

// Runs every case of a shared model (`file`, under models/, of the gold file `name`); `bar` picks the cases that must
// match llama.cpp byte for byte. Where `same_as` names another file of the model, every case's tokens must also be
// those that file gives.
void check_gold(const std::string& name, bool GoldCase::*bar, const char* bar_name, const std::string& file = "",
                const std::string& same_as = "") {
  DF_REQUIRE_SHARED(model_path, "models/" + (file.empty() ? name + ".gguf" : file));
  const auto cases = read_gold((shared_dir() / "models" / (name + ".gold.json")).string());
  std::unique_ptr<engine::Model> reference;
  if (!same_as.empty()) {
    DF_REQUIRE_SHARED(reference_path, "models/" + same_as);
    auto r = engine::Model::open(reference_path.string(), {.n_ctx = 512, .threads = 2});
    ASSERT_TRUE(r.ok()) << r.error().message;
    reference = std::move(r).value();
  }
  auto model = engine::Model::open(model_path.string(), {.n_ctx = 512, .threads = 2});
  ASSERT_TRUE(model.ok()) << model.error().message;
  // The same model streaming from disk under the smallest RAM budget its plan accepts: experts through a pool
  // of 2 x top-k slots, or layers through 2 slots; a per-layer embedding table, and the token embeddings of an
  // untied head, through row caches of kMinRowSlots rows; beside the KV cache and work buffers.
  const auto& full_plan = (*model)->plan();
  auto probe = engine::Model::open(model_path.string(), {.n_ctx = 512, .threads = 1, .ram_budget = full_plan.total_bytes()});
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  const auto& p = (*probe)->plan();
  const uint64_t least = p.min_budget();
  auto streamed = engine::Model::open(model_path.string(), {.n_ctx = 512, .threads = 2, .ram_budget = least});
  ASSERT_TRUE(streamed.ok()) << streamed.error().message;
  ASSERT_NE((*streamed)->plan().mode, engine::Residency::kAllResident);
  const bool tables = p.ple.table_bytes || p.tokens.table_bytes;
  if (p.ple.table_bytes) {
    EXPECT_EQ((*streamed)->plan().ple.slots, engine::kMinRowSlots);
  }
  if (p.tokens.table_bytes) {
    EXPECT_EQ((*streamed)->plan().tokens.slots, engine::kMinRowSlots);
  }
  // A store of the model, streamed at the same budget: one read per record, the same records.
  const auto store = temp_dir("gold_store_" + name + (file.empty() ? "" : "_split"));
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
    if (reference) {
      engine::Session r = new_session(*reference);
      EXPECT_EQ(ids, greedy(r, c.prompt_ids, c.n_predict)) << file << " and " << same_as << " differ";
    }
    EXPECT_EQ(greedy(t, c.prompt_ids, c.n_predict), ids) << name << " under a " << least << "-byte budget";
    EXPECT_EQ(greedy(u, c.prompt_ids, c.n_predict), ids) << name << " from a store under a " << least << "-byte budget";
  }
  for (auto* m : {&*streamed, &*from_store}) {
    const engine::ModelStats st = (*m)->stats();
    ASSERT_TRUE(st.ram.has_value());
    EXPECT_GT(st.ram->cache.misses, 0u);
    if (tables) {
      ASSERT_TRUE(st.rows.has_value());
      EXPECT_GT(st.rows->cache.misses, 0u);  // rows read from disk, beyond the warm ones
      EXPECT_GT(st.rows->cache.hits, 0u);
    }
  }
}

class Gold : public ::testing::TestWithParam<const char*> {};

TEST_P(Gold, GreedyMatchesLlamaCpp) { check_gold(GetParam(), &GoldCase::robust, "robust"); }

// The K-quant, IQ4, gemma4 and qwen35moe files: llama.cpp's CPU backend made their gold on x86 with AVX2 (its
// AVX-512 build rounds some products differently), the CPU's orders here; every case must match, those where
// llama.cpp's batched and one-token prefills part included.
class GoldAll : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldAll, GreedyMatchesLlamaCpp) { check_gold(GetParam(), &GoldCase::any, "all"); }

// gemma4, both layouts: 26B-A4B's (sliding and full layers, a dense MLP beside 16 experts) and E2B's (per-layer
// embeddings, KV shared by the last 5 layers); llama.cpp's CUDA backend parts from its CPU on most of their cases.
INSTANTIATE_TEST_SUITE_P(Gemma4Models, GoldAll, ::testing::Values("gemma4-moe-q8_0", "gemma4-e2b-q8_0"),
                         model_param_name);
// qwen35moe (Gated DeltaNet + gated attention, routed and shared experts).
INSTANTIATE_TEST_SUITE_P(HybridModels, GoldAll, ::testing::Values("qwen35moe-q8_0"), model_param_name);

INSTANTIATE_TEST_SUITE_P(KQuantModels, GoldAll,
                         ::testing::Values("qwen3-q6_k", "qwen3-q2_k", "qwen3moe-q4_k_m", "qwen3moe-q3_k_m",
                                           "qwen3moe-iq4_xs", "mixtral-q5_k_m"),
                         model_param_name);

// Resident, under the smallest RAM budget, and from a store ingested from the three parts.
TEST(GoldSplit, SplitGgufGivesWhatTheSingleFileGives) {
  check_gold("qwen3-q4_0", &GoldCase::robust, "robust", "split/qwen3-q4_0-00001-of-00003.gguf", "qwen3-q4_0.gguf");
}

INSTANTIATE_TEST_SUITE_P(Models, Gold,
                         ::testing::Values("qwen3moe-q4_0", "qwen3moe-q8_0", "qwen3-q4_0", "llama-f16", "mixtral-q4_0"),
                         model_param_name);

}  // namespace
}  // namespace df::test
