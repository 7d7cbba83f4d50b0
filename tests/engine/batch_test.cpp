// Sessions stepping together (engine::decode_batch) give each session, bit for bit, the logits it has stepping
// alone.
#include <gtest/gtest.h>

#include <cstring>

#include "diskformer/engine/batch.h"
#include "diskformer/engine/model.h"
#include "diskformer/sampling/sampler.h"
#include "support/tiny_model.h"
#include "model/gold.h"
#include "support/sessions.h"
#include "support/test_paths.h"
#include "support/compare.h"

namespace df::test {
namespace {

using engine::Model;
using engine::Session;

// Prompts of different lengths (so the sequences sit at different positions), one of them batched in 64+ tokens;
// ids below 8,192 (the K-quant files keep that much of their vocabulary).
std::vector<std::vector<int32_t>> prompts() {
  std::vector<int32_t> longp = {1};
  for (int i = 0; i < 70; ++i) longp.push_back(20 + (i * 37) % 200);
  return {{1, 450, 4996, 1735, 1701}, {1, 17, 42}, longp, {1, 99}};
}

// Each prompt alone: its logits after the prompt and after each of `steps` greedy tokens.
std::vector<std::vector<std::vector<float>>> alone(Model& m, const std::vector<std::vector<int32_t>>& ps, int steps) {
  std::vector<std::vector<std::vector<float>>> out;
  for (const auto& p : ps) {
    Session s = new_session(m);
    EXPECT_TRUE(s.eval(p).ok());
    auto& rows = out.emplace_back();
    rows.emplace_back(s.logits().begin(), s.logits().end());
    for (int i = 0; i < steps; ++i) {
      const int32_t id = sampling::argmax(s.logits());
      EXPECT_TRUE(s.eval(std::span<const int32_t>(&id, 1)).ok());
      rows.emplace_back(s.logits().begin(), s.logits().end());
    }
  }
  return out;
}

void expect_batch_equals_alone(Model& m, int steps) {
  const auto ps = prompts();
  const auto ref = alone(m, ps, steps);
  std::vector<Session> ss;
  for (const auto& p : ps) {
    ss.push_back(new_session(m));
    ASSERT_TRUE(ss.back().eval(p).ok());
  }
  for (int i = 0; i < steps; ++i) {
    // Sequences join and leave: the first step runs two of them, later steps all of them.
    const size_t n = i == 0 ? 2 : ss.size();
    std::vector<Session*> step;
    std::vector<int32_t> ids;
    for (size_t k = 0; k < n; ++k) {
      step.push_back(&ss[k]);
      ids.push_back(sampling::argmax(ss[k].logits()));
    }
    if (i == 0)
      for (size_t k = n; k < ss.size(); ++k) {  // the others step alone, as they would outside the batch
        const int32_t id = sampling::argmax(ss[k].logits());
        ASSERT_TRUE(ss[k].eval(std::span<const int32_t>(&id, 1)).ok());
      }
    const Status st = engine::decode_batch(m, step, ids);
    ASSERT_TRUE(st.ok()) << st.error().message;
    for (size_t k = 0; k < ss.size(); ++k)
      EXPECT_TRUE(same_bits(ss[k].logits(), ref[k][size_t(i) + 1])) << "sequence " << k << " after step " << i;
  }
}

class BatchShared : public ::testing::TestWithParam<const char*> {};

TEST_P(BatchShared, StepsTogetherEqualStepsAlone) {
  DF_REQUIRE_SHARED(path, std::string("models/") + GetParam() + ".gguf");
  auto m = Model::open(path.string(), {.n_ctx = 256, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  expect_batch_equals_alone(**m, 6);
}

// f16 and f32 products, Q4_K's grouped rows, the interleaved Q4_0 and Q8_0 four-row products: every order a batch
// could take differently from a single token.
INSTANTIATE_TEST_SUITE_P(Models, BatchShared,
                         ::testing::Values("qwen3moe-q4_0", "llama-f16", "mixtral-q4_0", "qwen3moe-q4_k_m",
                                           "qwen3moe-q8_0", "qwen3-q6_k"),
                         model_param_name);

TEST(Batch, KjvModelStepsTogetherEqualStepsAlone) {
  const auto path = source_dir() / "models" / "kjv-moe.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing " << path;
  auto m = Model::open(path.string(), {.n_ctx = 256, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  expect_batch_equals_alone(**m, 6);
}

TEST(Batch, StreamedExpertsStepTogetherAsAlone) {
  const auto dir = temp_dir("batch_streamed");
  const std::string path = (dir / "m.gguf").string();
  TinyModel tm;
  tm.n_layer = 4, tm.n_expert = 32, tm.n_expert_used = 4, tm.n_ff_expert = 128, tm.n_vocab = 256;
  ASSERT_TRUE(write_tiny_model(path, tm).ok());
  auto full = Model::open(path, {.n_ctx = 128, .threads = 2});
  ASSERT_TRUE(full.ok()) << full.error().message;
  // A quarter of the model's weights beside the KV cache and work buffers the budget covers too.
  const auto& fp = (*full)->plan();
  const uint64_t budget = fp.model_bytes / 4 + fp.kv_bytes + fp.work_bytes;
  auto small = Model::open(path, {.n_ctx = 128, .threads = 2, .ram_budget = budget});
  ASSERT_TRUE(small.ok()) << small.error().message;
  std::vector<int32_t> a = {1, 17, 42, 99, 3}, b = {1, 250, 7};
  Session ra = new_session(**full), rb = new_session(**full), sa = new_session(**small), sb = new_session(**small);
  for (auto* s : {&ra, &sa}) ASSERT_TRUE(s->eval(a).ok());
  for (auto* s : {&rb, &sb}) ASSERT_TRUE(s->eval(b).ok());
  for (int i = 0; i < 8; ++i) {
    const int32_t ia = sampling::argmax(ra.logits()), ib = sampling::argmax(rb.logits());
    ASSERT_TRUE(ra.eval(std::span<const int32_t>(&ia, 1)).ok());
    ASSERT_TRUE(rb.eval(std::span<const int32_t>(&ib, 1)).ok());
    std::vector<Session*> step = {&sa, &sb};
    std::vector<int32_t> ids = {ia, ib};
    ASSERT_TRUE(engine::decode_batch(**small, step, ids).ok());
    EXPECT_TRUE(same_bits(sa.logits(), ra.logits()));
    EXPECT_TRUE(same_bits(sb.logits(), rb.logits()));
  }
  EXPECT_GT((*small)->stats().streamed_bytes_read, 0u);
}

TEST(Batch, FullContextIsRefusedAndNothingAdvances) {
  const auto dir = temp_dir("batch_ctx");
  const std::string path = (dir / "m.gguf").string();
  TinyModel tm;
  ASSERT_TRUE(write_tiny_model(path, tm).ok());
  auto m = Model::open(path, {.n_ctx = 8, .threads = 1});
  ASSERT_TRUE(m.ok()) << m.error().message;
  Session a = new_session(**m), b = new_session(**m);
  ASSERT_TRUE(a.eval(std::vector<int32_t>{1, 2, 3}).ok());
  ASSERT_TRUE(b.eval(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}).ok());
  std::vector<Session*> step = {&a, &b};
  std::vector<int32_t> ids = {4, 9};
  const Status st = engine::decode_batch(**m, step, ids);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("context overflow: session 1"), std::string::npos) << st.error().message;
  EXPECT_EQ(a.n_past(), 3u);
  EXPECT_EQ(b.n_past(), 8u);
}

}  // namespace
}  // namespace df::test
