// The decoding interface: Sampler::sample_top_k (what a backend that cuts the vocabulary elsewhere hands back) draws
// exactly what sample() draws from the full logits; generate() through a CPU session draws what the sampler draws
// from its logits step by step; run --backend cpu prints llama.cpp's completion, and --backend cuda without a usable GPU fails with one
// clear line.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "diskformer/engine/session.h"
#include "diskformer/engine/generate.h"
#include "model/gold.h"
#include "support/cli_run.h"
#include "support/sessions.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

// The repeat-penalized top-k of the logits as (value, id), in a scrambled order: what a device hands back.
std::vector<std::pair<float, int32_t>> top_k_of(const std::vector<float>& logits, const sampling::SamplingParams& p,
                                                const std::vector<int32_t>& history, std::mt19937& rng) {
  std::vector<std::pair<float, int32_t>> c;
  for (size_t i = 0; i < logits.size(); ++i) c.push_back({logits[i], int32_t(i)});
  if (p.repeat_penalty != 1.0f && p.repeat_last_n != 0) {
    const size_t n = p.repeat_last_n < 0 ? history.size() : std::min<size_t>(history.size(), p.repeat_last_n);
    for (size_t i = history.size() - n; i < history.size(); ++i) {
      float& l = c[size_t(history[i])].first;
      const float orig = logits[size_t(history[i])];
      l = orig > 0 ? orig / p.repeat_penalty : orig * p.repeat_penalty;  // once per id, from the original value
    }
  }
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  const size_t k = p.temp <= 0 ? 1 : size_t(p.top_k);
  c.resize(k);
  std::shuffle(c.begin(), c.end(), rng);
  return c;
}

TEST(SampleTopK, DrawsWhatSampleDrawsFromTheFullLogits) {
  std::mt19937 rng(5);
  const sampling::SamplingParams settings[] = {
      {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 1},
      {.temp = 1.5f, .top_k = 7, .top_p = 1.0f, .min_p = 0.0f, .repeat_penalty = 1.3f, .seed = 2},
      {.temp = 0.3f, .top_k = 200, .top_p = 0.5f, .min_p = 0.1f, .repeat_penalty = 0.7f, .repeat_last_n = -1,
       .seed = 3},
      {.temp = 2.0f, .top_k = 1, .seed = 4},
      {.temp = 0.0f, .repeat_penalty = 2.0f, .seed = 5},
  };
  for (const auto& p : settings) {
    // Logits on a coarse grid (many exact ties, which the cut must break toward the lower id), zeros of both signs.
    std::vector<float> logits(3000);
    std::uniform_int_distribution<int> q(-40, 40);
    for (auto& l : logits) l = float(q(rng)) * 0.25f;
    logits[10] = -0.0f, logits[11] = 0.0f;
    sampling::Sampler full(p), cut(p);
    std::vector<int32_t> history = {10, 11, 5, 5, 2999};
    int differ = 0;
    for (int step = 0; step < 200; ++step) {
      const int32_t a = full.sample(logits, history);
      const int32_t b = cut.sample_top_k(top_k_of(logits, p, history, rng));
      differ += a != b;
      history.push_back(a);
    }
    EXPECT_EQ(differ, 0) << "temp " << p.temp << " top_k " << p.top_k;
  }
}

// generate() through a session draws what the sampler draws from the session's logits, step by step.
TEST(CpuSession, GeneratesWhatTheSamplerDrawsFromItsLogits) {
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  auto m = engine::Model::open(path.string(), {.n_ctx = 128, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const std::vector<int32_t> prompt = {1, 450, 4996, 17354, 1701};
  engine::GenerateOptions o{.n_predict = 12, .ignore_eos = true};
  o.sampling = {.temp = 0.9f, .repeat_penalty = 1.2f, .seed = 77};
  engine::Session s = new_session(**m);
  std::vector<int32_t> ha;
  ASSERT_TRUE(engine::generate(s, prompt, o, {}, ha).ok());
  // By hand: the same sampler over the logits of each step.
  engine::Session t = new_session(**m);
  sampling::Sampler sampler(o.sampling);
  std::vector<int32_t> hb(prompt);
  ASSERT_TRUE(t.eval(prompt).ok());
  for (int i = 0; i < o.n_predict; ++i) {
    const int32_t id = sampler.sample(t.logits(), hb);
    hb.push_back(id);
    if (i + 1 < o.n_predict) {
      ASSERT_TRUE(t.eval(std::span<const int32_t>(&id, 1)).ok());
    }
  }
  EXPECT_EQ(ha, hb);
  EXPECT_EQ(t.n_past(), s.n_past());
  EXPECT_EQ(s.stats().backend, "cpu");
  s.truncate(3);
  EXPECT_EQ(s.n_past(), 3u);
}

TEST(RunBackend, CpuPrintsLlamaCppsCompletion) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q4_0.gguf");
  const auto cases = read_gold((shared_dir() / "models/qwen3moe-q4_0.gold.json").string());
  const GoldCase& c = cases.at(0);
  ASSERT_TRUE(c.robust);
  const CliRun r = run_cli_capture("run --backend cpu -m " + model.string() + " -p '" + c.prompt +
                                   "' -n 32 --temp 0 --ignore-eos -t 2");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, c.completion);
  EXPECT_NE(r.err.find("backend cpu, prompt"), std::string::npos) << r.err;
}

TEST(RunBackend, CudaWithoutAUsableGpuFailsWithOneClearLine) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q4_0.gguf");
  const CliRun r = run_cli_capture("run --backend cuda -m " + model.string() + " -p hi -n 2 --temp 0 -t 2");
  if (r.status == 0) GTEST_SKIP() << "a GPU ran it (tests/gpu checks its output)";
  // 2: a build without the CUDA backend (a usage error); 1: a CUDA build on a machine without a device.
  EXPECT_TRUE(r.status == 1 || r.status == 2) << r.status;
  EXPECT_EQ(r.out, "");
  const bool no_build = r.err.find("--backend cuda: this build has no CUDA backend") != std::string::npos;
  const bool no_device = r.err.find("--backend cuda: no CUDA device (") != std::string::npos;
  EXPECT_TRUE(no_build || no_device) << r.err;
  EXPECT_EQ(r.status, no_build ? 2 : 1);
  // The device check comes before the model is read.
  EXPECT_EQ(r.err.find("layers"), std::string::npos) << r.err;
  // chat refuses the same way.
  const CliRun c = run_cli_capture("chat --backend cuda -m " + model.string() + " -n 2 --temp 0 -t 2", "Hello\n");
  EXPECT_EQ(c.status, r.status);
  EXPECT_EQ(c.out, "");
}

}  // namespace
}  // namespace df::test
