// Sessions stepping together on the GPU (engine::decode_batch: one forward pass, each token's attention over its own
// session's cache) give each session the logits it has stepping alone, to rounding, and so its greedy tokens: all
// resident, and with the routed experts streamed through two top-k's worth of GPU slots (each expert the step needs
// copied once for every sequence that uses it, or computed by the CPU for all of them).
#include <algorithm>
#include <cmath>

#include "diskformer/engine/batch.h"
#include "gpu/gpu_support.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

struct Steps {
  std::vector<int32_t> ids;                  // the greedy choices
  std::vector<std::vector<float>> logits;    // the logits each was chosen from
};

std::vector<float> last_row(engine::Session& s, int64_t V) {
  const auto l = s.logits();
  return std::vector<float>(l.end() - V, l.end());
}

// The prompts alone, n greedy steps each.
std::vector<Steps> alone(engine::Model& m, const std::vector<GoldCase>& cases, int n) {
  const int64_t V = m.spec().n_vocab;
  sampling::Sampler greedy({.temp = 0});
  std::vector<Steps> out;
  for (const GoldCase& c : cases) {
    auto s = session_of(m);
    Steps& st = out.emplace_back();
    if (!s || !s->eval(c.prompt_ids).ok()) continue;
    std::vector<int32_t> history = c.prompt_ids;
    for (int i = 0; i < n; ++i) {
      st.logits.push_back(last_row(*s, V));
      st.ids.push_back(s->next_token(greedy, history));
      history.push_back(st.ids.back());
      if (i + 1 < n) {
        EXPECT_TRUE(s->eval(std::span(&st.ids.back(), 1)).ok());
      }
    }
  }
  return out;
}

// The same prompts prefilled one by one, then stepped together; the first step leaves the last sequence out (it
// steps alone), as slots join and leave. cpu_experts: the experts the CPU computed in the steps together (the first
// sequence's session runs them and never steps alone).
std::vector<Steps> together(engine::Model& m, const std::vector<GoldCase>& cases, int n, uint64_t& cpu_experts) {
  const int64_t V = m.spec().n_vocab;
  sampling::Sampler greedy({.temp = 0});
  std::vector<engine::Session> ss;
  std::vector<std::vector<int32_t>> history;
  std::vector<Steps> out(cases.size());
  for (const GoldCase& c : cases) {
    auto s = session_of(m);
    if (!s) return out;
    EXPECT_TRUE(s->eval(c.prompt_ids).ok());
    ss.push_back(std::move(*s));
    history.push_back(c.prompt_ids);
  }
  const uint64_t cpu_before = ss.empty() ? 0 : ss[0].stats().cpu_experts;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> next;
    for (size_t k = 0; k < ss.size(); ++k) {
      out[k].logits.push_back(last_row(ss[k], V));
      out[k].ids.push_back(ss[k].next_token(greedy, history[k]));
      history[k].push_back(out[k].ids.back());
      next.push_back(out[k].ids.back());
    }
    if (i + 1 == n) break;
    size_t joined = ss.size();
    if (i == 0 && ss.size() > 2) {
      joined = ss.size() - 1;
      EXPECT_TRUE(ss.back().eval(std::span(&next.back(), 1)).ok());
    }
    std::vector<engine::Session*> step;
    for (size_t k = 0; k < joined; ++k) step.push_back(&ss[k]);
    const Status st = engine::decode_batch(m, step, std::span(next).first(joined));
    EXPECT_TRUE(st.ok()) << st.error().message;
    if (!st.ok()) return out;
  }
  cpu_experts = ss.empty() ? 0 : ss[0].stats().cpu_experts - cpu_before;
  return out;
}

// The first `sequences` gold prompts; returns the experts the CPU computed in the steps together.
uint64_t expect_together_as_alone(engine::Model& m, const std::string& tag, size_t sequences) {
  const std::vector<GoldCase> all = read_gold((shared_dir() / ("models/" + tag + ".gold.json")).string());
  EXPECT_GE(all.size(), sequences) << tag;
  const std::vector<GoldCase> cases(all.begin(), all.begin() + std::min(sequences, all.size()));
  const int n = 16;
  uint64_t cpu_experts = 0;
  const auto ref = alone(m, cases, n), got = together(m, cases, n, cpu_experts);
  for (size_t k = 0; k < cases.size(); ++k) {
    EXPECT_EQ(got[k].ids.size(), ref[k].ids.size()) << tag << " sequence " << k;
    if (got[k].ids.size() != ref[k].ids.size()) continue;
    float worst = 0;
    for (size_t i = 0; i < ref[k].ids.size(); ++i) {
      const std::vector<float>&a = ref[k].logits[i], &b = got[k].logits[i];
      float diff = 0;
      for (size_t v = 0; v < a.size(); ++v) diff = std::max(diff, std::fabs(a[v] - b[v]));
      worst = std::max(worst, diff);
      if (got[k].ids[i] != ref[k].ids[i]) {
        // A choice may flip only at a tie closer than the rounding moved the logits.
        const float margin = a[size_t(ref[k].ids[i])] - a[size_t(got[k].ids[i])];
        std::printf("[gpu-batch] %s sequence %zu parts at step %zu: margin %.4g, logits differ by %.4g\n",
                    tag.c_str(), k, i, margin, diff);
        EXPECT_LE(margin, 2 * diff) << tag << " sequence " << k << " step " << i;
        break;
      }
    }
    std::printf("[gpu-batch] %s sequence %zu: logits within %.3g of stepping alone\n", tag.c_str(), k, worst);
    EXPECT_LT(worst, 0.05f) << tag << " sequence " << k;
  }
  return cpu_experts;
}

class GpuBatch : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuBatch, StepsTogetherAsAlone) {
  DF_REQUIRE_GPU();
  const std::string tag = GetParam();
  DF_REQUIRE_SHARED(path, "models/" + tag + ".gguf");
  {
    auto m = open_gpu(path.string(), 512);
    ASSERT_TRUE(m);
    expect_together_as_alone(*m, tag, 4);
  }
  auto probe = engine::Model::open(path.string(), {.n_ctx = 64});
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  if (!(*probe)->spec().moe()) return;
  const uint32_t slots = 2 * (*probe)->spec().n_expert_used;
  auto m = open_gpu(path.string(), 512, {.slots = slots});
  ASSERT_TRUE(m);
  // The steps together give the CPU its share of their missed experts, as a step of one sequence does: steps of 2
  // and 3 tokens (the fused decode launches) and of 5 and 6 (grouped by expert).
  for (size_t sequences : {3, 6}) {
    EXPECT_GT(expect_together_as_alone(*m, tag, sequences), 0u) << tag << ", " << sequences << " sequences";
  }
  const engine::ModelStats st = m->stats();
  ASSERT_TRUE(st.gpu.has_value());
  EXPECT_GT(st.gpu->cache.misses, 0u);
  // Without the CPU's share they match too.
  auto copies_only = open_gpu(path.string(), 512, {.slots = slots, .cpu_experts = false});
  ASSERT_TRUE(copies_only);
  EXPECT_EQ(expect_together_as_alone(*copies_only, tag, 6), 0u) << tag;
}

INSTANTIATE_TEST_SUITE_P(Models, GpuBatch, ::testing::Values("qwen3-q4_0", "qwen3moe-q4_0", "mixtral-q4_0"),
                         model_param_name);

}  // namespace
}  // namespace df::test
