// gemma4 in the engine: the per-layer embedding table's place under a RAM budget (resident where it fits after
// the layers, else a warmed row cache), the same tokens either way, the warm-up's id ranges, and the GPU plan (the
// table leaves the GPU first; the fused gate_up experts count in the records).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <numeric>

#include "diskformer/backend/cuda/plan.h"
#include "diskformer/engine/model.h"
#include "diskformer/engine/model_files.h"
#include "diskformer/engine/row_warmup.h"
#include "diskformer/sampling/sampler.h"
#include "support/cli_run.h"
#include "support/sessions.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

using engine::Model;
using engine::Session;

const std::vector<int32_t> kPrompt = {1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203};

TEST(Gemma4Engine, PerLayerEmbeddingTableUnderARamBudget) {
  DF_REQUIRE_SHARED(path, "models/gemma4-e2b-q8_0.gguf");
  auto all = Model::open(path.string(), {.n_ctx = 128, .threads = 2});
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_FALSE((*all)->plan().rows_stream());
  EXPECT_EQ((*all)->row_tier(), nullptr);
  Session s = new_session(**all);
  const auto want = greedy_ids(s, kPrompt, 16);

  // A budget of twice the model (slots are rounded up to pages): every layer slot and the table resident.
  auto roomy = Model::open(path.string(), {.n_ctx = 128, .threads = 2, .ram_budget = 2 * (*all)->plan().model_bytes});
  ASSERT_TRUE(roomy.ok()) << roomy.error().message;
  const engine::WeightPlan& p = (*roomy)->plan();
  EXPECT_EQ(p.slots, p.n_records);
  EXPECT_FALSE(p.rows_stream());
  EXPECT_EQ(p.ple.table_bytes, 32000u * 170u);
  EXPECT_EQ(p.tokens.table_bytes, 0u) << "a tied head reads every token row: they stay in the arena";

  // Every layer slot, the table on disk through a row cache (the budget short of the table by one row).
  const uint64_t layers_only = p.min_budget() + uint64_t(p.n_records - p.min_slots) * p.slot_bytes;
  auto rows = Model::open(path.string(), {.n_ctx = 128, .threads = 2, .ram_budget = layers_only});
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  EXPECT_EQ((*rows)->plan().slots, p.n_records);
  EXPECT_EQ((*rows)->plan().ple.slots, engine::kMinRowSlots);
  ASSERT_NE((*rows)->row_tier(), nullptr);
  Session r = new_session(**rows);
  EXPECT_EQ(greedy_ids(r, kPrompt, 16), want);
  const engine::ModelStats st = (*rows)->stats();
  ASSERT_TRUE(st.rows.has_value());
  EXPECT_GT(st.rows->cache.misses, 0u);
  EXPECT_EQ(st.streamed_row_bytes, st.rows->cache.misses * p.ple.row_bytes);
  EXPECT_GE(st.bytes_from_disk(), st.resident_bytes_read + st.streamed_row_bytes);
  (*rows)->reset_stats();
  EXPECT_EQ((*rows)->stats().streamed_row_bytes, 0u);

  // Below the smallest budget: refused with the numbers, the rows among them.
  auto small = Model::open(path.string(), {.n_ctx = 128, .threads = 2, .ram_budget = p.min_budget() - 1});
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.error().message.find("256 per-layer embedding rows of 170 B"), std::string::npos)
      << small.error().message;
}

TEST(Gemma4Engine, WarmRowsAreLowIdsAndSingleCharacterBlocks) {
  DF_REQUIRE_SHARED(path, "vocab/ggml-vocab-gemma4.gguf");
  auto f = gguf::read_file(path.string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  const uint64_t rows = 262145, budget = 16384;
  const auto ranges = engine::warm_row_ranges(*f, rows, budget);
  ASSERT_FALSE(ranges.empty());
  EXPECT_EQ(ranges.front().first, 0u);
  uint64_t total = 0, end = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i > 0) {
      EXPECT_GT(ranges[i].first, end) << "ranges sorted, apart and not touching";
    }
    end = ranges[i].first + ranges[i].count;
    EXPECT_LE(end, rows);
    total += ranges[i].count;
  }
  EXPECT_EQ(total, budget);
  EXPECT_GE(ranges.size(), 2u) << "a block of single characters beyond the low ids";
  // Without a vocabulary, low ids take the budget.
  gguf::File none;
  const auto low = engine::warm_row_ranges(none, rows, 100);
  ASSERT_EQ(low.size(), 1u);
  EXPECT_EQ(low[0].first, 0u);
  EXPECT_EQ(low[0].count, 100u);
  EXPECT_TRUE(engine::warm_row_ranges(none, rows, 0).empty());
}

TEST(Gemma4Engine, GpuPlanSendsThePerLayerTableThroughAGpuRowCacheFirst) {
  DF_REQUIRE_SHARED(e2b, "models/gemma4-e2b-q8_0.gguf");
  auto f = engine::open_model_files(e2b.string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  const auto& mf = **f;
  auto all = cuda::plan_gpu(mf.spec, mf.tensors, mf.layouts, {.n_ctx = 256, .max_batch = 64});
  ASSERT_TRUE(all.ok()) << all.error().message;
  const uint64_t table = mf.tensors.ple_table->n_bytes;
  EXPECT_GE(all->resident.ple_table, table);
  EXPECT_EQ(all->ple_row_slots, 0u);
  // A budget short of the table's bytes: its rows through a GPU row cache that takes what the budget leaves,
  // everything else resident (a dense model).
  const uint64_t rows = mf.tensors.ple_table->rows(), row_bytes = mf.tensors.ple_table->row_bytes();
  const uint64_t budget = all->total_bytes() - table / 2;
  auto less = cuda::plan_gpu(mf.spec, mf.tensors, mf.layouts, {.budget = budget, .n_ctx = 256, .max_batch = 64});
  ASSERT_TRUE(less.ok()) << less.error().message;
  EXPECT_GT(less->ple_row_slots, 64u);
  EXPECT_LT(less->ple_row_slots, rows);
  EXPECT_GE(less->resident.ple_table, less->ple_row_slots * row_bytes + rows * 4);  // the slots and the id map
  EXPECT_LE(less->total_bytes(), budget);
  EXPECT_GT(less->total_bytes() + row_bytes + 512, budget) << "the rows take what the budget leaves";
  EXPECT_NE(less->describe().find("per-layer embeddings through " + std::to_string(less->ple_row_slots) + " GPU rows"),
            std::string::npos)
      << less->describe();
  EXPECT_EQ(less->to_json()["ple_row_slots"].get<uint32_t>(), less->ple_row_slots);
  // Asked for: at least a batch's rows, with or without a budget.
  auto asked = cuda::plan_gpu(mf.spec, mf.tensors, mf.layouts,
                              {.budget = budget, .n_ctx = 256, .max_batch = 64, .row_slots = 10});
  ASSERT_TRUE(asked.ok()) << asked.error().message;
  EXPECT_EQ(asked->ple_row_slots, 64u);
  auto unbudgeted = cuda::plan_gpu(mf.spec, mf.tensors, mf.layouts, {.n_ctx = 256, .max_batch = 64, .row_slots = 300});
  ASSERT_TRUE(unbudgeted.ok()) << unbudgeted.error().message;
  EXPECT_EQ(unbudgeted->ple_row_slots, 300u);
  EXPECT_LT(unbudgeted->total_bytes(), all->total_bytes());
  // Less than the rest: refused with the numbers (dense models do not stream on the GPU).
  auto none = cuda::plan_gpu(mf.spec, mf.tensors, mf.layouts,
                             {.budget = less->total_bytes() / 2, .n_ctx = 256, .max_batch = 64});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("dense models do not stream"), std::string::npos) << none.error().message;

  DF_REQUIRE_SHARED(moe, "models/gemma4-moe-q8_0.gguf");
  auto g = engine::open_model_files(moe.string());
  ASSERT_TRUE(g.ok()) << g.error().message;
  const auto& mg = **g;
  auto full = cuda::plan_gpu(mg.spec, mg.tensors, mg.layouts, {.n_ctx = 256, .max_batch = 64});
  ASSERT_TRUE(full.ok()) << full.error().message;
  uint64_t experts = 0;
  for (const auto& l : mg.tensors.layers) experts += l.gate_up_exps->n_bytes + l.down_exps->n_bytes;
  EXPECT_GE(full->experts_bytes, experts);
  // Streaming: a record holds one expert's gate and up halves and its down rows.
  const auto& x = mg.layouts.experts[0];
  EXPECT_EQ(full->record_bytes, cache::plane_slot_bytes(cuda::expert_planes(mg.layouts)));
  EXPECT_GE(full->record_bytes, x.gate.bytes() + x.up.bytes() + x.down.bytes());
}

// The commands report the row cache: run's stats line, bench --json's row fields, inspect's per-layer spec.
TEST(Gemma4Engine, CommandsReportTheRowCache) {
  DF_REQUIRE_SHARED(path, "models/gemma4-e2b-q8_0.gguf");
  auto probe = Model::open(path.string(), {.n_ctx = 64, .threads = 1, .ram_budget = uint64_t(64) << 20});
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  const std::string budget = " --ram-budget " + std::to_string((*probe)->plan().min_budget());
  const CliRun run = run_cli_capture("run -m " + path.string() + " -p 'Hello world' -n 8 --temp 0 -t 2 -c 64" + budget);
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("row cache hit rate"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("B/token of rows from disk"), std::string::npos) << run.err;
  const CliRun bench =
      run_cli_capture("bench -m " + path.string() + " -p 8 -n 4 -r 1 -t 2 -c 64 --json --quiet" + budget);
  ASSERT_EQ(bench.status, 0) << bench.err;
  const auto j = nlohmann::json::parse(bench.out);
  EXPECT_EQ(j["row_slots"], engine::kMinRowSlots);
  EXPECT_TRUE(j["row_hit_rate"].is_number()) << bench.out;
  EXPECT_TRUE(j["row_bytes_per_token"].is_number()) << bench.out;
  const CliRun resident = run_cli_capture("bench -m " + path.string() + " -p 8 -n 4 -r 1 -t 2 --json --quiet");
  ASSERT_EQ(resident.status, 0) << resident.err;
  EXPECT_TRUE(nlohmann::json::parse(resident.out)["row_hit_rate"].is_null());
  const CliRun inspect = run_cli_capture("inspect -m " + path.string());
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("spec: gemma4, 10 layers"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("layer 3"), std::string::npos) << inspect.out;
  const CliRun plan = run_cli_capture("inspect -m " + path.string() + " --gpu-budget 1G");
  EXPECT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find("per-layer embeddings"), std::string::npos) << plan.out;
}

}  // namespace
}  // namespace df::test
