// The RAM plan against -c: the budget covers the KV cache and the work buffers beside the weights (a longer context
// leaves fewer slots, and one that does not fit is refused with the numbers), and without a budget a plan larger
// than the machine's RAM is refused; on CUDA the KV cache is the GPU plan's and stays out of the RAM plan.
#include <gtest/gtest.h>

#include <sys/sysinfo.h>

#include "diskformer/engine/model.h"
#include "diskformer/engine/plan.h"
#include "support/tiny_model.h"
#include "support/cli_run.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

using engine::plan_weights;

std::unique_ptr<engine::ModelFiles> files_of(const TinyModel& m, const std::string& name) {
  const std::string path = (temp_dir("ram_plan_" + name) / "m.gguf").string();
  EXPECT_TRUE(write_tiny_model(path, m).ok());
  auto f = engine::open_model_files(path);
  EXPECT_TRUE(f.ok()) << f.error().message;
  return std::move(f).value();
}

TinyModel moe() {
  TinyModel m;
  m.n_expert = 32, m.n_expert_used = 4, m.n_ff_expert = 128;
  return m;
}

TEST(RamPlan, TheBudgetCoversTheKvCacheAndWorkBuffers) {
  const auto f = files_of(moe(), "moe");
  const auto probe = plan_weights(*f, {.n_ctx = 8192});
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  const uint64_t budget = probe->min_budget() + 40 * probe->slot_bytes;
  const auto a = plan_weights(*f, {.n_ctx = 256, .budget = budget});
  const auto b = plan_weights(*f, {.n_ctx = 8192, .budget = budget});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->kv_bytes, uint64_t(4) * 256 * (32 + 32) * 2);  // 4 layers, f16 keys and values of one 32-wide head
  EXPECT_EQ(b->kv_bytes, a->kv_bytes * 32);
  EXPECT_LE(a->total_bytes(), budget);
  EXPECT_LE(b->total_bytes(), budget);
  // The longer context's KV cache takes slots the shorter one keeps: a 4 MiB larger KV cache, 500 slots of 8 KiB.
  EXPECT_EQ(b->slots, b->min_slots + 40);
  EXPECT_EQ(a->slots, a->n_records);
  EXPECT_EQ(a->n_records, 4u * 32);
  EXPECT_GT(b->work_bytes, 0u);

  // A context whose KV cache does not fit is refused with the numbers, and says that -c is the way out.
  const auto refused = plan_weights(*f, {.n_ctx = 1 << 20, .budget = budget});
  ASSERT_FALSE(refused.ok());
  const std::string& e = refused.error().message;
  EXPECT_NE(e.find("(" + std::to_string(budget) + " bytes) is too small for this model at -c 1048576"),
            std::string::npos) << e;
  EXPECT_NE(e.find("KV cache 512.00 MiB at 1048576 positions"), std::string::npos) << e;
  EXPECT_NE(e.find("a smaller context needs less"), std::string::npos) << e;

  // On CUDA the RAM plan leaves the KV cache to the GPU's.
  const auto gpu = plan_weights(*f, {.n_ctx = 1 << 20, .budget = budget, .kv_in_ram = false});
  ASSERT_TRUE(gpu.ok()) << gpu.error().message;
  EXPECT_EQ(gpu->fixed_bytes(), gpu->resident_bytes);
}

// Under a budget the token embeddings of an untied head stay in the arena where the budget holds them after the
// slots, else their rows go through a row cache of what is left (at least kMinRowSlots); a GPU run's plan keeps them.
TEST(RamPlan, TokenEmbeddingsStreamWhereTheBudgetEndsBeforeThem) {
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  auto f = engine::open_model_files(path.string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  const engine::ModelFiles& mf = **f;
  ASSERT_NE(mf.tensors.output, mf.tensors.token_embd);
  const auto all = plan_weights(mf, {.n_ctx = 256});
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(all->tokens.table_bytes, 0u);
  const auto probe = plan_weights(mf, {.n_ctx = 256, .budget = all->total_bytes()});
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  const engine::RowTablePlan& t = probe->tokens;
  EXPECT_EQ(t.table_bytes, mf.tensors.token_embd->n_bytes);
  EXPECT_EQ(t.row_bytes, mf.tensors.token_embd->row_bytes());
  EXPECT_FALSE(t.streams()) << "the whole model's budget holds them";
  EXPECT_NEAR(double(t.in_arena), double(t.table_bytes), 8192.0);  // as the arena packs it
  // The smallest budget: the fewest slots and rows, and the arena without the table.
  const auto least = plan_weights(mf, {.n_ctx = 256, .budget = probe->min_budget()});
  ASSERT_TRUE(least.ok()) << least.error().message;
  EXPECT_EQ(least->slots, least->min_slots);
  EXPECT_EQ(least->tokens.slots, engine::kMinRowSlots);
  EXPECT_LE(least->total_bytes(), probe->min_budget());
  EXPECT_LT(least->resident_bytes, probe->resident_bytes);
  EXPECT_NE(least->describe().find("token embeddings on disk through 256 rows"), std::string::npos)
      << least->describe();
  const auto short_of = plan_weights(mf, {.n_ctx = 256, .budget = least->min_budget() - 1});
  ASSERT_FALSE(short_of.ok());
  EXPECT_NE(short_of.error().message.find("256 token embedding rows of"), std::string::npos) << short_of.error().message;
  const auto gpu = plan_weights(mf, {.n_ctx = 256, .budget = probe->total_bytes(), .kv_in_ram = false, .token_rows = false});
  ASSERT_TRUE(gpu.ok()) << gpu.error().message;
  EXPECT_EQ(gpu->tokens.table_bytes, 0u);
}

TEST(RamPlan, WithoutABudgetThePlanMustFitTheMachine) {
  const auto f = files_of(moe(), "machine");
  const uint64_t ram = 1ull << 30;  // a machine of 1 GiB
  ASSERT_TRUE(plan_weights(*f, {.n_ctx = 4096, .machine_ram = ram}).ok());
  const auto refused = plan_weights(*f, {.n_ctx = 1 << 22, .machine_ram = ram});  // a KV cache of 2 GiB
  ASSERT_FALSE(refused.ok());
  const std::string& e = refused.error().message;
  EXPECT_NE(e.find("at -c 4194304 needs"), std::string::npos) << e;
  EXPECT_NE(e.find("more than this machine's 1.00 GiB"), std::string::npos) << e;
  EXPECT_NE(e.find("KV cache 2.00 GiB"), std::string::npos) << e;
  EXPECT_NE(e.find("--ram-budget"), std::string::npos) << e;
  // CUDA's RAM plan holds no KV cache: not refused for it.
  EXPECT_TRUE(plan_weights(*f, {.n_ctx = 1 << 22, .kv_in_ram = false, .machine_ram = ram}).ok());
  EXPECT_TRUE(engine::machine_ram_bytes().has_value());
}

// The runs: -c 16777216 under --ram-budget 100M is refused with the numbers (no bad_alloc, no OOM kill), and
// without a budget a KV cache larger than this machine's RAM is refused too.
TEST(RamPlan, RunRefusesAContextThatDoesNotFit) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  const auto dir = temp_dir("ram_plan_cli");
  const std::string small = (dir / "small.gguf").string(), wide = (dir / "wide.gguf").string();
  TinyModel m;
  m.tokenizer_from = vocab.string();
  ASSERT_TRUE(write_tiny_model(small, m).ok());
  CliRun r = run_cli_capture("run -m " + small + " -p hi -n 2 -t 1 --backend cpu -c 16777216 --ram-budget 100M");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("RAM budget 100.00 MiB (104857600 bytes) is too small for this model at -c 16777216"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("KV cache 8.00 GiB at 16777216 positions"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
  // A context beyond what the model was trained on (512 positions) is allowed, with a warning.
  r = run_cli_capture("run -m " + small + " -p hi -n 2 -t 1 --backend cpu -c 1024 --quiet");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("warning: -c 1024 is beyond the 512 positions the model was trained on"), std::string::npos)
      << r.err;

  // 16 layers of 16 key-value heads of 64: 64 KiB a position, 1 TiB at 16M positions.
  m.arch = "llama", m.n_expert = 0, m.n_layer = 16, m.n_embd = 128, m.n_head = 16, m.n_head_kv = 16, m.head_dim = 64;
  ASSERT_TRUE(write_tiny_model(wide, m).ok());
  const uint64_t kv = 16ull * 16 * 64 * 2 * 2 << 24;
  struct sysinfo si {};
  ASSERT_EQ(::sysinfo(&si), 0);
  if (uint64_t(si.totalram) * si.mem_unit > kv) GTEST_SKIP() << "this machine holds a KV cache of " << kv << " bytes";
  r = run_cli_capture("run -m " + wide + " -p hi -n 2 -t 1 --backend cpu -c 16777216");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("at -c 16777216 needs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("KV cache 1.00 TiB at 16777216 positions"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("more than this machine's"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace df::test
