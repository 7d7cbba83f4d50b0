#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "diskformer/model/routing_stats.h"
#include "support/test_paths.h"

namespace {

TEST(RoutingStats, SharesReuseAndEvenness) {
  df::model::RoutingStats s(/*layers*/ 2, /*experts*/ 4, /*used*/ 2);
  const std::array<int32_t, 6> sel = {0, 1, 1, 2, 1, 2};  // three tokens: {0,1} {1,2} {1,2}
  s.record(0, sel.data(), 3);
  EXPECT_EQ(s.tokens(0), 3u);
  EXPECT_DOUBLE_EQ(s.share(0, 1), 3.0 / 6.0);
  EXPECT_DOUBLE_EQ(s.share(0, 3), 0.0);
  // Pairs: {0,1}->{1,2} shares 1, {1,2}->{1,2} shares 2: 3 of 4 choices reused.
  EXPECT_DOUBLE_EQ(s.reuse(0), 3.0 / 4.0);
  // A new call continues the sequence; break_sequence ends it.
  const std::array<int32_t, 2> next = {2, 3};
  s.record(0, next.data(), 1);
  EXPECT_DOUBLE_EQ(s.reuse(0), 4.0 / 6.0);
  s.break_sequence();
  s.record(0, next.data(), 1);
  EXPECT_DOUBLE_EQ(s.reuse(0), 4.0 / 6.0);
  EXPECT_EQ(s.tokens(1), 0u);

  df::model::RoutingStats even(1, 4, 1);
  const std::array<int32_t, 4> all = {0, 1, 2, 3};
  even.record(0, all.data(), 4);
  EXPECT_NEAR(even.evenness(0), 1.0, 1e-12);
  df::model::RoutingStats one(1, 4, 1);
  const std::array<int32_t, 3> same = {2, 2, 2};
  one.record(0, same.data(), 3);
  EXPECT_NEAR(one.evenness(0), 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(one.reuse(0), 1.0);
}

std::string run_cli(const std::string& args, int* status) {
  const std::string cmd = df::test::cli_path().string() + " " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

TEST(RoutingCommand, ReportsEveryLayerOfAMoeModel) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q8_0.gguf");
  int status = 0;
  const std::string out = run_cli("routing -m " + model.string() +
                                      " -p 'In the beginning God created the heaven and the earth. And the earth was "
                                      "without form, and void.' --json --quiet -t 2",
                                  &status);
  ASSERT_EQ(WEXITSTATUS(status), 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["n_expert"], 16);
  EXPECT_EQ(j["n_expert_used"], 4);
  ASSERT_EQ(j["layers"].size(), 4u);
  for (const auto& l : j["layers"]) {
    double sum = 0;
    for (double s : l["shares"]) sum += s;
    EXPECT_NEAR(sum, 1.0, 1e-9);
    EXPECT_GT(l["evenness"].get<double>(), 0.0);
    EXPECT_LE(l["evenness"].get<double>(), 1.0 + 1e-12);
    EXPECT_GE(l["reuse"].get<double>(), 0.0);
    EXPECT_LE(l["reuse"].get<double>(), 1.0);
  }
}

TEST(RoutingCommand, RefusesADenseModel) {
  DF_REQUIRE_SHARED(model, "models/llama-f16.gguf");
  int status = 0;
  run_cli("routing -m " + model.string() + " -p hello --quiet", &status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  run_cli("routing -m " + model.string(), &status);
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

}  // namespace
