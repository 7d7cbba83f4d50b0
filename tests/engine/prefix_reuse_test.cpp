// The prefix-reuse plan keeps only the cached positions that reproduce a fresh evaluation, and evaluates the rest
// in the fresh evaluation's orders.
#include <gtest/gtest.h>

#include <cstring>

#include "diskformer/engine/model.h"
#include "diskformer/engine/prefix_reuse.h"
#include "diskformer/sampling/sampler.h"
#include "support/sessions.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

using engine::Model;
using engine::Session;

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

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
  for (const auto& s : plan.steps) EXPECT_FALSE(s.one_by_one);
}

TEST(PrefixPlan, OneRowPositionsAreKeptAndTheShortRestGoesOneByOne) {
  // 80 prompt tokens (one-row orders) and 10 decoded; the next prompt extends them by 5 tokens.
  const auto cached = iota_tokens(90);
  const auto spans = spans_of(80, 512, 10);
  auto p = cached;
  for (int i = 0; i < 5; ++i) p.push_back(500 + i);
  const auto plan = plan_prefix(cached, spans, p, 512, true);
  EXPECT_EQ(plan.keep, 90u);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].begin, 90u);
  EXPECT_EQ(plan.steps[0].end, 95u);
  EXPECT_TRUE(plan.steps[0].one_by_one);  // five tokens as one batch would take the batched orders
}

TEST(PrefixPlan, ABatchedPromptIsKeptOnlyWhole) {
  // A 20-token prompt took batch-dependent orders; a fresh 30-token prompt with the same start takes others.
  const auto cached = iota_tokens(20);
  const auto spans = spans_of(20, 512, 0);
  const auto p = iota_tokens(30);
  EXPECT_EQ(plan_prefix(cached, spans, p, 512, true).keep, 0u);
  // The same 20 tokens again: the last must be evaluated, and the fresh batch of 20 only goes whole.
  EXPECT_EQ(plan_prefix(cached, spans, cached, 512, true).keep, 0u);
  // Without the exact rule the common prefix is kept (at least one token left to evaluate).
  EXPECT_EQ(plan_prefix(cached, spans, p, 512, false).keep, 20u);
  EXPECT_EQ(plan_prefix(cached, spans, cached, 512, false).keep, 19u);
}

TEST(PrefixPlan, AWholeBatchOfAnEarlierPromptIsKept) {
  // 600 tokens cached in batches of 512 + 88; a new prompt of 700 shares the first 600.
  const auto cached = iota_tokens(600);
  const auto spans = spans_of(600, 512, 0);
  const auto p = iota_tokens(700);
  const auto plan = plan_prefix(cached, spans, p, 512, true);
  EXPECT_EQ(plan.keep, 600u);  // [0, 512) one-row; [512, 600) one-row both ways (88 >= 64)
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].begin, 600u);
  EXPECT_EQ(plan.steps[0].end, 700u);
  EXPECT_FALSE(plan.steps[0].one_by_one);  // 100 tokens: one-row orders as one batch
}

TEST(PrefixPlan, DivergingTokensStopTheReuse) {
  const auto cached = iota_tokens(100);
  const auto spans = spans_of(100, 512, 0);
  auto p = iota_tokens(100);
  p[70] = 9999;
  const auto plan = plan_prefix(cached, spans, p, 512, true);
  EXPECT_EQ(plan.keep, 70u);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_TRUE(plan.steps[0].one_by_one);  // 30 tokens of a 100-token one-row batch
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
  for (const auto& st : plan.steps) {
    if (st.one_by_one) {
      for (uint32_t i = st.begin; i < st.end; ++i) ASSERT_TRUE(s.eval(std::span<const int32_t>(&next[i], 1)).ok());
    } else {
      ASSERT_TRUE(s.eval(std::span<const int32_t>(next.data() + st.begin, st.end - st.begin)).ok());
    }
  }
  Session fresh = new_session(**m);
  ASSERT_TRUE(fresh.eval(next).ok());
  EXPECT_TRUE(same_bits(s.logits(), fresh.logits()));
}

}  // namespace
}  // namespace df::test
