// The prefix-reuse plan keeps only the cached positions that reproduce a fresh evaluation, and evaluates the rest
// in the fresh evaluation's orders.
#include <gtest/gtest.h>

#include <cstring>

#include "diskformer/engine/model.h"
#include "diskformer/engine/prefix_reuse.h"
#include "diskformer/sampling/sampler.h"
#include "support/sessions.h"
#include "support/test_paths.h"
#include "support/compare.h"

namespace df::test {
namespace {

using engine::Model;
using engine::Session;

using engine::EvalSpan;
using engine::plan_prefix;

std::vector<int32_t> iota_tokens(uint32_t n, int32_t from = 1) {
  std::vector<int32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = from + int32_t(i);
  return t;
}

// The spans a fresh evaluation in batches of n_batch, then `decoded` single steps, records.
std::vector<EvalSpan> spans_of(uint32_t prompt, uint32_t n_batch, uint32_t decoded) {
  std::vector<EvalSpan> s;
  for (uint32_t b = 0; b < prompt; b += n_batch)
    engine::record_spans({.begin = b, .end = std::min(prompt, b + n_batch)}, s);
  for (uint32_t i = 0; i < decoded; ++i) s.push_back({prompt + i, prompt + i + 1});
  return s;
}

TEST(PrefixPlan, NothingCachedEvaluatesAsRunDoes) {
  const auto p = iota_tokens(1100);
  const auto plan = plan_prefix({}, {}, p, 512, true);
  EXPECT_EQ(plan.keep, 0u);
  ASSERT_EQ(plan.steps.size(), 3u);
  EXPECT_EQ(plan.steps[0].end, 512u);
  EXPECT_EQ(plan.steps[2].begin, 1024u);
  EXPECT_EQ(plan.steps[2].end, 1100u);
}

TEST(PrefixPlan, DecodedPositionsAreNotKeptInsideAFreshBatch) {
  // 512 prompt tokens and 10 decoded; the next prompt extends them by 8 tokens. A fresh evaluation computes
  // [512, 530) as one batch, where the decoded positions took one-row orders.
  const auto cached = iota_tokens(522);
  const auto spans = spans_of(512, 512, 10);
  auto p = cached;
  for (int i = 0; i < 8; ++i) p.push_back(900 + i);
  const auto plan = plan_prefix(cached, spans, p, 512, true);
  EXPECT_EQ(plan.keep, 512u);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].begin, 512u);
  EXPECT_EQ(plan.steps[0].end, 530u);
}

TEST(PrefixPlan, ABatchedPromptIsKeptWhereItsOrdersAgree) {
  // Batches of 2..63 tokens: the same orders for each position but Q4_K's last n % 4 rows.
  const auto p = iota_tokens(30);
  // 8 cached tokens in one batch take the fresh batch's orders; the rest [8, 30) as one batch takes them too.
  auto plan = plan_prefix(iota_tokens(8), spans_of(8, 512, 0), p, 512, true);
  EXPECT_EQ(plan.keep, 8u);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].begin, 8u);
  EXPECT_EQ(plan.steps[0].end, 30u);
  // 10 cached tokens: positions 8 and 9 went alone in Q4_K's order, where the fresh batch groups them.
  EXPECT_EQ(plan_prefix(iota_tokens(10), spans_of(10, 512, 0), p, 512, true).keep, 8u);
  // 20 cached tokens: the same prompt again; the last must be evaluated, and the rest as a batch of whole groups.
  const auto cached = iota_tokens(20);
  EXPECT_EQ(plan_prefix(cached, spans_of(20, 512, 0), cached, 512, true).keep, 16u);
  // Without the exact rule the common prefix is kept (at least one token left to evaluate).
  EXPECT_EQ(plan_prefix(cached, spans_of(20, 512, 0), p, 512, false).keep, 20u);
  EXPECT_EQ(plan_prefix(cached, spans_of(20, 512, 0), cached, 512, false).keep, 19u);
}

TEST(PrefixPlan, TiledBatchesAreKeptWhereTheirOrdersAgree) {
  // 600 tokens cached in batches of 512 + 88; a new prompt of 700 shares the first 600 and computes [512, 700) as one
  // batch: tiled both ways, the Q4_K groups of four aligned, so [512, 600) is kept and [600, 700) goes as a batch.
  auto plan = plan_prefix(iota_tokens(600), spans_of(600, 512, 0), iota_tokens(700), 512, true);
  EXPECT_EQ(plan.keep, 600u);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].begin, 600u);
  EXPECT_EQ(plan.steps[0].end, 700u);
  // Cached as 512 + 30: [512, 542) took the one-query attention, which the fresh batch of 188 does not.
  plan = plan_prefix(iota_tokens(542), spans_of(542, 512, 0), iota_tokens(700), 512, true);
  EXPECT_EQ(plan.keep, 512u);
  // A fresh batch of 64 or more takes the tiled attention, which its rest as a batch of fewer would not: the rest
  // re-evaluated is the shortest of 64 rows or more whose Q4_K groups fall as the fresh batch's.
  const auto cached = iota_tokens(100);
  auto p = iota_tokens(100);
  p[70] = 9999;
  plan = plan_prefix(cached, spans_of(100, 512, 0), p, 512, true);
  EXPECT_EQ(plan.keep, 36u);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].begin, 36u);
  EXPECT_EQ(plan.steps[0].end, 100u);
}

// A plan's evaluation gives the logits a fresh evaluation gives, bit for bit: cached batches of 32 tokens, decoded
// tokens, and a continuation.
TEST(PrefixPlan, ReuseReproducesAFreshEvaluation) {
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  auto m = Model::open(path.string(), {.n_ctx = 512, .threads = 2, .n_batch = 32});
  ASSERT_TRUE(m.ok()) << m.error().message;
  std::vector<int32_t> first = {1};
  for (int i = 0; i < 100; ++i) first.push_back(30 + (i * 53) % 900);
  // The session holds the first prompt (evaluated in batches of 32) and 12 greedy tokens.
  Session s = new_session(**m);
  std::vector<int32_t> cached;
  std::vector<EvalSpan> spans;
  for (const auto& st : plan_prefix({}, {}, first, 32, true).steps) {
    ASSERT_TRUE(s.eval(std::span<const int32_t>(first.data() + st.begin, st.end - st.begin)).ok());
    engine::record_spans(st, spans);
  }
  cached = first;
  for (int i = 0; i < 12; ++i) {
    const int32_t id = sampling::argmax(s.logits());
    ASSERT_TRUE(s.eval(std::span<const int32_t>(&id, 1)).ok());
    cached.push_back(id);
    spans.push_back({uint32_t(cached.size() - 1), uint32_t(cached.size())});
  }
  // The next prompt continues the conversation.
  std::vector<int32_t> next = cached;
  for (int i = 0; i < 9; ++i) next.push_back(400 + i * 7);
  const auto plan = plan_prefix(cached, spans, next, 32, true);
  EXPECT_GT(plan.keep, 0u);
  s.truncate(plan.keep);
  for (const auto& st : plan.steps)
    ASSERT_TRUE(s.eval(std::span<const int32_t>(next.data() + st.begin, st.end - st.begin)).ok());
  Session fresh = new_session(**m);
  ASSERT_TRUE(fresh.eval(next).ok());
  EXPECT_TRUE(same_bits(s.logits(), fresh.logits()));
}

}  // namespace
}  // namespace df::test
