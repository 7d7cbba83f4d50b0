// The engine beyond single completions: batched vs token-by-token prefill, KV-cache reuse, streaming under a RAM
// budget, and refusals of bad input.
#include <gtest/gtest.h>

#include "diskformer/engine/generate.h"
#include "diskformer/engine/model.h"
#include "diskformer/engine/session.h"
#include "diskformer/sampling/sampler.h"
#include "support/tiny_model.h"
#include "model/gold.h"
#include "support/sessions.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

using engine::Model;
using engine::Session;

std::vector<float> logits_of(Session& s) { return {s.logits().begin(), s.logits().end()}; }

class SharedModels : public ::testing::TestWithParam<const char*> {};

TEST_P(SharedModels, BatchedPrefillEqualsTokenByToken) {
  DF_REQUIRE_SHARED(path, std::string("models/") + GetParam() + ".gguf");
  auto m = Model::open(path.string(), {.n_ctx = 256, .threads = 2});
  auto m1 = Model::open(path.string(), {.n_ctx = 256, .threads = 2, .n_batch = 1});
  auto m5 = Model::open(path.string(), {.n_ctx = 256, .threads = 2, .n_batch = 5});
  ASSERT_TRUE(m.ok() && m1.ok() && m5.ok()) << m.error().message;
  const std::vector<int32_t> prompt = {1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203};
  Session batched = new_session(**m), single = new_session(**m1), chunks = new_session(**m5);
  ASSERT_TRUE(batched.eval(prompt).ok());
  ASSERT_TRUE(single.eval(prompt).ok());
  ASSERT_TRUE(chunks.eval(prompt).ok());
  EXPECT_EQ(logits_of(batched), logits_of(single));
  EXPECT_EQ(logits_of(batched), logits_of(chunks));
}

TEST_P(SharedModels, KvCacheReuseEqualsRecomputation) {
  DF_REQUIRE_SHARED(path, std::string("models/") + GetParam() + ".gguf");
  auto m = Model::open(path.string(), {.n_ctx = 256, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const std::vector<int32_t> a = {1, 450, 4996, 17354, 1701, 29916};
  const std::vector<int32_t> b = {432, 17204, 975, 278};
  std::vector<int32_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  Session fresh = new_session(**m), reused = new_session(**m);
  ASSERT_TRUE(fresh.eval(ab).ok());
  // Fill the session with a different continuation, then cut back to the shared prefix and continue.
  ASSERT_TRUE(reused.eval(a).ok());
  ASSERT_TRUE(reused.eval(std::vector<int32_t>{100, 200, 300, 400, 500}).ok());
  reused.truncate(uint32_t(a.size()));
  ASSERT_TRUE(reused.eval(b).ok());
  EXPECT_EQ(reused.n_past(), fresh.n_past());
  EXPECT_EQ(logits_of(fresh), logits_of(reused));
}

INSTANTIATE_TEST_SUITE_P(Models, SharedModels, ::testing::Values("qwen3moe-q4_0", "llama-f16", "mixtral-q4_0", "gemma4-moe-q8_0", "gemma4-e2b-q8_0"),
                         model_param_name);

struct BudgetCase {
  const char* name;
  TinyModel model;
};
void PrintTo(const BudgetCase& c, std::ostream* os) { *os << c.name; }

class Budget : public ::testing::TestWithParam<BudgetCase> {};

TEST_P(Budget, QuarterOfTheModelGivesIdenticalOutput) {
  const auto dir = temp_dir(std::string("budget_") + GetParam().name);
  const std::string path = (dir / "m.gguf").string();
  auto written = write_tiny_model(path, GetParam().model);
  ASSERT_TRUE(written.ok()) << written.error().message;
  auto full = Model::open(path, {.n_ctx = 128, .threads = 2});
  ASSERT_TRUE(full.ok()) << full.error().message;
  // A quarter of the model's bytes for its weights, beside the KV cache and work buffers the budget covers too.
  const auto& full_plan = (*full)->plan();
  const uint64_t quarter = full_plan.model_bytes / 4, budget = full_plan.kv_bytes + full_plan.work_bytes + quarter;
  auto small = Model::open(path, {.n_ctx = 128, .threads = 2, .ram_budget = budget});
  ASSERT_TRUE(small.ok()) << small.error().message;
  const auto& plan = (*small)->plan();
  EXPECT_LE(plan.resident_bytes + plan.cache_bytes(), quarter);
  EXPECT_LE(plan.total_bytes(), budget);
  EXPECT_GT(plan.slots, 0u);
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7, 8, 9, 10, 11, 200, 31, 64};
  Session a = new_session(**full), b = new_session(**small);
  const auto ids_full = greedy_ids(a, prompt, 24);
  const auto ids_small = greedy_ids(b, prompt, 24);
  EXPECT_EQ(ids_full, ids_small);
  EXPECT_EQ(logits_of(a), logits_of(b));
  const auto st = (*small)->stats();
  ASSERT_TRUE(st.ram.has_value());
  EXPECT_GT(st.ram->cache.misses, 0u);
  EXPECT_GT(st.streamed_bytes_read, 0u);
  // Streaming re-reads what does not fit: more bytes come from disk than the resident part alone.
  EXPECT_GT(st.bytes_from_disk(), plan.resident_bytes);

  // The smallest budget the plan accepts runs too, with the same output.
  const uint64_t least = plan.min_budget();
  auto tight = Model::open(path, {.n_ctx = 128, .threads = 2, .ram_budget = least});
  ASSERT_TRUE(tight.ok()) << tight.error().message;
  EXPECT_EQ((*tight)->plan().slots, plan.min_slots);
  Session c = new_session(**tight);
  EXPECT_EQ(greedy_ids(c, prompt, 24), ids_full);
  EXPECT_FALSE(Model::open(path, {.n_ctx = 128, .threads = 2, .ram_budget = least - 1}).ok());
}

TinyModel moe_model() {
  TinyModel m;
  m.n_layer = 4, m.n_expert = 32, m.n_expert_used = 4, m.n_ff_expert = 128, m.n_vocab = 256;
  return m;
}
TinyModel dense_model() {
  TinyModel m;
  m.arch = "llama", m.n_expert = 0, m.n_ff = 256, m.n_layer = 12, m.n_embd = 128, m.n_head = 4, m.n_head_kv = 2;
  m.type = gguf::GgmlType::Q8_0;
  return m;
}
TinyModel mixtral_model() {
  TinyModel m;
  m.arch = "llama", m.n_expert = 8, m.n_expert_used = 2, m.n_ff_expert = 256, m.n_ff = 256, m.type = gguf::GgmlType::F16;
  return m;
}

INSTANTIATE_TEST_SUITE_P(Models, Budget,
                         ::testing::Values(BudgetCase{"qwen3moe", moe_model()}, BudgetCase{"dense", dense_model()},
                                           BudgetCase{"mixtral", mixtral_model()}),
                         [](const auto& info) { return std::string(info.param.name); });

// Bad input.

std::string open_error(const TinyModel& m, const std::string& name, engine::ModelOptions o = {.threads = 1}) {
  const auto dir = temp_dir("bad_" + name);
  const std::string path = (dir / "m.gguf").string();
  auto st = write_tiny_model(path, m);
  if (!st.ok()) return "write failed: " + st.error().message;
  auto model = Model::open(path, o);
  return model.ok() ? std::string("opened") : model.error().message;
}

// The server's slots as one figure: the model's GPU memory once, each session's own once more.
TEST(SessionStats, SessionsTogetherCountTheModelOnce) {
  const engine::SessionStats a{.backend = "cuda", .device = "G", .device_bytes = 1000, .own_device_bytes = 100,
                               .device_used_peak = 5000, .cpu_experts = 3};
  engine::SessionStats b = a;
  b.device_bytes = 1050;  // the same model, a larger KV cache
  b.own_device_bytes = 150;
  b.device_used_peak = 6000;
  const engine::SessionStats both[] = {a, b};
  const engine::SessionStats t = engine::sessions_together(both);
  EXPECT_EQ(t.device_bytes, 1150u);
  EXPECT_EQ(t.own_device_bytes, 250u);
  EXPECT_EQ(t.device_used_peak, 6000u);
  EXPECT_EQ(t.cpu_experts, 6u);
  EXPECT_EQ(t.device, "G");
  const engine::SessionStats cpu[] = {{.backend = "cpu"}, {.backend = "cpu"}};
  EXPECT_FALSE(engine::sessions_together(cpu).device_bytes.has_value());
}

TEST(BadInput, UnsupportedArchitectureIsNamed) {
  TinyModel m = moe_model();
  m.arch = "gpt2";
  const auto e = open_error(m, "arch");
  EXPECT_NE(e.find("unsupported architecture 'gpt2'"), std::string::npos) << e;
}

TEST(BadInput, UnsupportedTypeIsNamed) {
  TinyModel m = moe_model();
  m.retype_tensor = "blk.1.attn_q.weight";
  const auto e = open_error(m, "type");
  EXPECT_NE(e.find("blk.1.attn_q.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("unsupported type mxfp4"), std::string::npos) << e;
  // The message lists what the engine does multiply.
  EXPECT_NE(e.find("q4_K"), std::string::npos) << e;
  EXPECT_NE(e.find("iq4_xs"), std::string::npos) << e;
}

TEST(BadInput, MissingTensorIsNamed) {
  TinyModel m = dense_model();
  m.drop_tensor = "blk.2.ffn_up.weight";
  const auto e = open_error(m, "missing");
  EXPECT_NE(e.find("tensor blk.2.ffn_up.weight is missing"), std::string::npos) << e;
}

TEST(BadInput, WrongShapeIsNamed) {
  TinyModel m = moe_model();
  m.widen_tensor = "blk.0.ffn_down_exps.weight";
  const auto e = open_error(m, "shape");
  EXPECT_NE(e.find("blk.0.ffn_down_exps.weight has shape [128, 64, 33], expected [128, 64, 32]"), std::string::npos)
      << e;
}

TEST(BadInput, BudgetTooSmallIsRefusedWithTheNumbers) {
  const auto e = open_error(moe_model(), "budget", {.threads = 1, .ram_budget = 4096});
  EXPECT_NE(e.find("RAM budget 4.00 KiB (4096 bytes) is too small"), std::string::npos) << e;
  EXPECT_NE(e.find("8 slots of"), std::string::npos) << e;
  EXPECT_NE(e.find("KV cache"), std::string::npos) << e;
}

TEST(BadInput, ContextOverflowIsAnError) {
  const auto dir = temp_dir("bad_ctx");
  const std::string path = (dir / "m.gguf").string();
  ASSERT_TRUE(write_tiny_model(path, moe_model()).ok());
  auto m = Model::open(path, {.n_ctx = 8, .threads = 1});
  ASSERT_TRUE(m.ok()) << m.error().message;
  Session s = new_session(**m);
  ASSERT_TRUE(s.eval(std::vector<int32_t>{1, 2, 3, 4, 5, 6}).ok());
  auto st = s.eval(std::vector<int32_t>{7, 8, 9});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("context overflow: 6 positions used + 3 new tokens exceed the context size 8"),
            std::string::npos)
      << st.error().message;
  auto bad_id = s.eval(std::vector<int32_t>{256});
  ASSERT_FALSE(bad_id.ok());
  EXPECT_NE(bad_id.error().message.find("token id 256"), std::string::npos) << bad_id.error().message;
}

TEST(BadInput, TiedOutputFallsBackToTokenEmbeddings) {
  TinyModel m = moe_model();
  m.tied_output = true;
  const auto dir = temp_dir("tied");
  const std::string path = (dir / "m.gguf").string();
  ASSERT_TRUE(write_tiny_model(path, m).ok());
  auto model = Model::open(path, {.n_ctx = 32, .threads = 1});
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ((*model)->files().tensors.output, (*model)->files().tensors.token_embd);
  Session s = new_session(**model);
  ASSERT_TRUE(s.eval(std::vector<int32_t>{1, 2, 3}).ok());
  EXPECT_EQ(s.logits().size(), 256u);
}

}  // namespace
}  // namespace df::test
