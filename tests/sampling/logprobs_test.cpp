// Log-probabilities of a step: the log-softmax of the raw logits, the top n in order (ties: the lower id first).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "diskformer/sampling/logprobs.h"

namespace df::sampling {
namespace {

TEST(Logprobs, LogSoftmaxOfTheRawLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f};
  const auto lp = step_logprobs(logits, 4, 3);
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - 3.0);
  const double lse = 3.0 + std::log(sum);
  EXPECT_NEAR(lp.chosen.logprob, 0.5 - lse, 1e-6);
  EXPECT_EQ(lp.chosen.id, 4);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].id, 1);  // a tie: the lower id first
  EXPECT_EQ(lp.top[1].id, 2);
  EXPECT_EQ(lp.top[2].id, 0);
  EXPECT_NEAR(lp.top[2].logprob, 1.0 - lse, 1e-6);
  EXPECT_EQ(step_logprobs(logits, 0, 99).top.size(), logits.size());
  EXPECT_TRUE(step_logprobs(logits, 0, 0).top.empty());
}

}  // namespace
}  // namespace df::sampling
