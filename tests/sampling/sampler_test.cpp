// Sampling: greedy ties, truncations (top-k, top-p, min-p), repeat penalty, and seeded draws.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "diskformer/sampling/sampler.h"

namespace df::sampling {
namespace {

TEST(Sampler, GreedyTakesTheLowestIdOnTies) {
  Sampler s({.temp = 0});
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(logits, {}), 1);
  EXPECT_EQ(argmax(logits), 1);
}

TEST(Sampler, RepeatPenaltyDemotesRecentTokens) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.5f, -1.0f};
  Sampler plain({.temp = 0});
  Sampler penal({.temp = 0, .repeat_penalty = 1.5f});
  const std::vector<int32_t> history = {1};
  EXPECT_EQ(plain.sample(logits, history), 1);
  EXPECT_EQ(penal.sample(logits, history), 2);  // 3.0 / 1.5 = 2.0 < 2.5
  // Negative logits are multiplied, pushing them further down: id 3 never wins.
  Sampler neg({.temp = 0, .repeat_penalty = 10.0f});
  const std::vector<float> all_neg = {-2.0f, -1.0f, -3.0f};
  EXPECT_EQ(neg.sample(all_neg, std::vector<int32_t>{1}), 0);  // -1 * 10 = -10
}

std::map<int32_t, int> histogram(const SamplingParams& p, const std::vector<float>& logits, int n) {
  Sampler s(p);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(logits, {})];
  return h;
}

TEST(Sampler, TruncationsKeepOnlyTheirSets) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f};
  // top-k 2: only the two best.
  auto h = histogram({.temp = 1.0f, .top_k = 2, .top_p = 1.0f, .min_p = 0.0f, .seed = 3}, logits, 500);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(4) && h.count(3));
  // min-p 0.3: p(i)/p(4) = e^(i-4) >= 0.3 keeps ids 4 and 3 (e^-1 = 0.37) but not 2 (e^-2 = 0.14).
  h = histogram({.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.3f, .seed = 4}, logits, 500);
  EXPECT_EQ(h.size(), 2u);
  // top-p 0.5: the best token alone holds 64% of the mass.
  h = histogram({.temp = 1.0f, .top_k = 0, .top_p = 0.5f, .min_p = 0.0f, .seed = 5}, logits, 200);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.begin()->first, 4);
  // No truncation: every token shows up, the best one most often.
  h = histogram({.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 6}, logits, 4000);
  EXPECT_EQ(h.size(), 5u);
  EXPECT_GT(h[4], h[3]);
  EXPECT_GT(h[3], h[2]);
}

TEST(Sampler, SeedDeterminesTheDraws) {
  const std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  const SamplingParams p{.temp = 2.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 42};
  Sampler a(p), b(p), c({.temp = 2.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 43});
  std::vector<int32_t> da, db, dc;
  for (int i = 0; i < 50; ++i) {
    da.push_back(a.sample(logits, {}));
    db.push_back(b.sample(logits, {}));
    dc.push_back(c.sample(logits, {}));
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
}

// --ignore-eos as llama.cpp: banned ids (its logit bias of -inf) are never chosen, greedy or drawn, whatever the
// penalty; the rest of the distribution is unchanged.
TEST(Sampler, BannedTokensAreNeverChosen) {
  const std::vector<float> logits = {0.0f, 1.0f, 5.0f, 4.0f, 3.0f};
  Sampler greedy({.temp = 0, .banned = {2}});
  EXPECT_EQ(greedy.sample(logits, {}), 3);
  Sampler penalized({.temp = 0, .repeat_penalty = 0.5f, .banned = {2, 99, -1}});  // the penalty raises id 2 further
  EXPECT_EQ(penalized.sample(logits, std::vector<int32_t>{2}), 3);
  auto h = histogram({.temp = 1.5f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 7, .banned = {2, 3}}, logits,
                     2000);
  EXPECT_EQ(h.count(2) + h.count(3), 0u);
  EXPECT_EQ(h.size(), 3u);
  // With top-k the cut is taken after the ban: the two best that are left.
  h = histogram({.temp = 1.0f, .top_k = 2, .top_p = 1.0f, .min_p = 0.0f, .seed = 8, .banned = {2}}, logits, 500);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(3) && h.count(4));
  // The same draws as an unbanned sampler on logits where the banned ids are -inf.
  std::vector<float> cut = logits;
  cut[2] = -INFINITY;
  Sampler a({.temp = 1.0f, .top_k = 3, .top_p = 0.9f, .min_p = 0.0f, .seed = 9, .banned = {2}});
  Sampler b({.temp = 1.0f, .top_k = 3, .top_p = 0.9f, .min_p = 0.0f, .seed = 9});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(logits, {}), b.sample(cut, {}));
}

}  // namespace
}  // namespace df::sampling
