// The server's parts on their own: request parsing, stop strings, the metrics text.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "server/metrics.h"
#include "server/request.h"
#include "server/stop_strings.h"

namespace df::server {
namespace {

TEST(Request, AChatRequestWithEveryField) {
  ApiRequest r;
  const auto e = parse_request(Endpoint::kChat, R"({
      "model": "m", "user": "ignored", "metadata": {"x": 1},
      "messages": [{"role": "developer", "content": "Be brief."},
                   {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
                   {"role": "assistant", "content": null}],
      "stream": true, "stream_options": {"include_usage": true}, "max_completion_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "top_k": 3.0, "min_p": 0.1, "repeat_penalty": 1.1, "seed": -1, "stop": "\n\n",
      "ignore_eos": true, "logprobs": true, "top_logprobs": 4, "n": 1, "presence_penalty": 0,
      "response_format": {"type": "text"}, "tools": []})", r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "Hello");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(*r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.seed, -1);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(r.ignore_eos, true);
  EXPECT_EQ(r.n_probs, 4);
}

TEST(Request, NullMeansAbsent) {
  ApiRequest r;
  const auto e = parse_request(Endpoint::kCompletion,
                               R"({"prompt": ["one prompt"], "max_tokens": null, "temperature": null, "stop": null})", r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.prompt, "one prompt");
  EXPECT_FALSE(r.max_tokens);
  EXPECT_FALSE(r.sampling.temperature);
  EXPECT_EQ(r.n_probs, -1);
}

TEST(Request, TokenIdsAndLegacyLogprobs) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(Endpoint::kCompletion, R"({"prompt": [1, 2, 3], "logprobs": 2})", r));
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.n_probs, 2);
  ASSERT_FALSE(parse_request(Endpoint::kCompletion, R"({"prompt": [[5, 6]]})", r));
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{5, 6}));
}

TEST(Request, ErrorsNameTheField) {
  ApiRequest r;
  auto e = parse_request(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "top_p": 1.5})", r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "top_p");
  EXPECT_NE(e->message.find("between 0 and 1"), std::string::npos) << e->message;
  e = parse_request(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", 3]})", r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "stop");
  e = parse_request(Endpoint::kChat, std::string(100, '{'), r);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("deeper than"), std::string::npos) << e->message;
  // Brackets inside strings are text, not nesting.
  std::string s = R"({"messages": [{"role": "user", "content": ")" + std::string(500, '[') + R"("}]})";
  EXPECT_FALSE(parse_request(Endpoint::kChat, s, r));
}

TEST(StopStrings, HoldsBackWhatMayStartAStopString) {
  StopMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.push("Hello E"), "Hello ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("X"), "ENX");  // not a stop string after all
  EXPECT_EQ(m.push("a\n"), "a");
  EXPECT_EQ(m.push("\nmore"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("later"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, TheEarliestStopWinsAndFlushGivesTheRest) {
  StopMatcher m({"cd", "b"});
  EXPECT_EQ(m.push("abcd"), "a");
  EXPECT_TRUE(m.stopped());
  StopMatcher n({"xyz"});
  EXPECT_EQ(n.push("axy"), "a");
  EXPECT_EQ(n.flush(), "xy");
  StopMatcher none({});
  EXPECT_EQ(none.push("text"), "text");
}

TEST(Metrics, PrometheusTextIsWellFormed) {
  SchedulerStats s;
  s.slots = 2;
  s.busy = 1;
  s.generated_tokens = 10;
  s.model.ram = cache::TierStats{};
  s.model.ram->cache.hits = 3;
  s.model.ram->cache.misses = 1;
  s.session.device_bytes = 1234;
  const std::string text =
      prometheus_text(s, {{{"/v1/completions", 200}, 5}}, {.backend = "cpu", .n_ctx = 128, .ram_budget = 99});
  const std::regex sample(R"(^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [-+0-9.e]+$)");
  std::istringstream in(text);
  std::string line, last_type;
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      last_type = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
    EXPECT_EQ(line.rfind(last_type, 0), 0u) << "sample without its TYPE line: " << line;
    ++samples;
  }
  EXPECT_GT(samples, 20);
  EXPECT_NE(text.find("diskformer_requests_total{route=\"/v1/completions\",status=\"200\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("diskformer_expert_cache_hit_ratio{tier=\"ram\"} 0.75\n"), std::string::npos) << text;
  EXPECT_NE(text.find("diskformer_gpu_used_bytes 1234\n"), std::string::npos);
  EXPECT_NE(text.find("diskformer_ram_budget_bytes 99\n"), std::string::npos);
  EXPECT_EQ(text.find("diskformer_gpu_budget_bytes"), std::string::npos);
}

}  // namespace
}  // namespace df::server
