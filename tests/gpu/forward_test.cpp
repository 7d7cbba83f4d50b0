// The GPU forward pass against the CPU engine on every shared model: logits of a prompt and of greedy decode steps
// (max abs difference and top-1 agreement printed), and greedy generation of the gold cases (robust ones byte for
// byte, the others report their common prefix), with and without the decode CUDA graph; from a GGUF and from a store.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "diskformer/store/ingest.h"
#include "gpu/gpu_support.h"
#include "model/gold.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

const char* const kModels[] = {"qwen3moe-q4_0",    "qwen3moe-q8_0",   "qwen3-q4_0",      "llama-f16",
                               "mixtral-q4_0",     "qwen3moe-q4_k_m", "qwen3moe-q3_k_m", "qwen3moe-iq4_xs",
                               "qwen3-q6_k",       "qwen3-q2_k",      "mixtral-q5_k_m",  "gemma4-moe-q8_0",
                               "gemma4-e2b-q8_0",  "qwen35moe-q8_0"};

int32_t host_argmax(const float* x, int64_t n) { return int32_t(std::max_element(x, x + n) - x); }

class GpuForward : public ::testing::TestWithParam<const char*> {};

// Prompt logits at every position, then 16 greedy steps (the CPU's choice fed to both). Top-1 must agree on at
// least 90% of positions (near-ties may flip), and the logits must be close: max abs difference <= 2% of the
// largest logit magnitude (summation orders and the f16 accumulator differ; a wrong kernel is far off) at 90% of the
// positions at least. The others may hold a routing flip: an expert whose router logit ties with the next one's
// within the rounding swaps for it and moves that position's logits by far more. Where llama.cpp's own CUDA backend
// parts from its CPU on every gold case (no case is robust: gemma4-moe-q8_0, 8 of 16 experts per token, whose
// top-8 boundary flips at most positions of this prompt), only the top-1 agreement is asserted.
TEST_P(GpuForward, LogitsMatchTheCpuEngine) {
  DF_REQUIRE_GPU();
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(path, "models/" + name + ".gguf");
  const auto cases = read_gold((shared_dir() / "models" / (name + ".gold.json")).string());
  ASSERT_FALSE(cases.empty());
  auto host = open_cpu(path.string(), 512);
  auto gpu_model = open_gpu(path.string(), 512, {.max_batch = 7});  // 7: prompts span several batches
  ASSERT_TRUE(host && gpu_model);
  const int64_t V = host->spec().n_vocab;
  auto cs = session_of(*host);
  auto gs = session_of(*gpu_model);
  ASSERT_TRUE(cs && gs);
  engine::Session &cpu = *cs, &gpu = *gs;
  sampling::Sampler greedy({.temp = 0});

  std::vector<int32_t> prompt = cases[0].prompt_ids;
  ASSERT_TRUE(cpu.eval(prompt, true).ok());
  ASSERT_TRUE(gpu.eval(prompt, true).ok());
  std::vector<float> want(cpu.logits().begin(), cpu.logits().end());
  std::vector<float> got(gpu.logits().begin(), gpu.logits().end());
  ASSERT_EQ(got.size(), want.size());

  int64_t positions = int64_t(prompt.size()), agree = 0;
  double max_mag = 0;
  std::vector<double> diffs;  // per position
  auto compare = [&](const float* g, const float* w) {
    agree += host_argmax(g, V) == host_argmax(w, V);
    double d = 0;
    for (int64_t i = 0; i < V; ++i) {
      d = std::max(d, std::fabs(double(g[i]) - double(w[i])));
      max_mag = std::max(max_mag, std::fabs(double(w[i])));
    }
    diffs.push_back(d);
  };
  for (size_t t = 0; t < prompt.size(); ++t) compare(got.data() + t * V, want.data() + t * V);
  EXPECT_EQ(gpu.next_token(greedy, prompt), host_argmax(got.data() + (prompt.size() - 1) * V, V));

  for (int step = 0; step < 16; ++step) {
    const int32_t next = host_argmax(cpu.logits().data() + (cpu.logits().size() / V - 1) * V, V);
    ASSERT_TRUE(cpu.eval(std::span(&next, 1)).ok());
    ASSERT_TRUE(gpu.eval(std::span(&next, 1)).ok());
    auto gl = gpu.logits();
    ASSERT_EQ(int64_t(gl.size()), V);
    compare(gl.data(), cpu.logits().data());
    EXPECT_EQ(gpu.next_token(greedy, prompt), host_argmax(gl.data(), V)) << "step " << step;
    ++positions;
  }
  const double tol = 0.02 * max_mag + 1e-3, max_diff = *std::max_element(diffs.begin(), diffs.end());
  const int64_t far = std::count_if(diffs.begin(), diffs.end(), [&](double d) { return d > tol; });
  std::printf("[gpu-vs-cpu] %-14s positions %lld, top-1 agree %lld (%.1f%%), max abs diff %.4g (max |logit| %.3g), "
              "%lld positions beyond %.3g\n",
              name.c_str(), (long long)positions, (long long)agree, 100.0 * agree / positions, max_diff, max_mag,
              (long long)far, tol);
  EXPECT_GE(double(agree), 0.9 * double(positions));
  const bool any_robust = std::any_of(cases.begin(), cases.end(), [](const auto& c) { return c.robust; });
  if (any_robust) {
    EXPECT_LE(double(far), 0.1 * double(positions));
  }
}

// (model, decode through the CUDA graph): a failing graph capture shows as its own failure.
class GpuGold : public ::testing::TestWithParam<std::tuple<const char*, bool>> {};

TEST_P(GpuGold, GreedyMatchesLlamaCpp) {
  DF_REQUIRE_GPU();
  const std::string name = std::get<0>(GetParam());
  const bool graph = std::get<1>(GetParam());
  DF_REQUIRE_SHARED(path, "models/" + name + ".gguf");
  const auto cases = read_gold((shared_dir() / "models" / (name + ".gold.json")).string());
  auto m = open_gpu(path.string(), 1024, {.decode_graph = graph});
  ASSERT_TRUE(m);
  auto cpu = open_cpu(path.string(), 1024);
  ASSERT_TRUE(cpu);
  expect_gold_cases(*m, *cpu, cases, "gpu-gold " + name + " graph=" + std::to_string(graph));
}

// A session reused after truncate() recomputes the dropped positions: same logits as a fresh session, and the
// graph replay gives the same logits as the plain launches (both run the same kernels).
TEST(GpuForwardSession, TruncateAndGraphReplayAgreeWithAFreshSession) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  // Experts per (token, slot) in batches too: the decode steps' fused expert kernels repeat those products
  // exactly, while grouped batches may sum in another order (the tensor-core tiles).
  auto ma = open_gpu(path.string(), 256, {.decode_graph = true, .grouped_experts = false});
  auto mb = open_gpu(path.string(), 256, {.decode_graph = false, .grouped_experts = false});
  ASSERT_TRUE(ma && mb);
  auto a = session_of(*ma);
  auto b = session_of(*mb);
  ASSERT_TRUE(a && b);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  ASSERT_TRUE(a->eval(std::span(prompt).first(5)).ok());
  for (int i = 5; i < 10; ++i) ASSERT_TRUE(a->eval(std::span(&prompt[i], 1)).ok());  // graph steps
  ASSERT_TRUE(b->eval(prompt).ok());
  auto la = a->logits();
  auto lb = b->logits();
  EXPECT_TRUE(std::equal(la.begin(), la.end(), lb.begin(), lb.end()));
  EXPECT_EQ(a->n_past(), 10u);
  // At least the KV cache: n_layer * n_ctx * (kv_dim_k + kv_dim_v) f16 values.
  const auto& sp = ma->spec();
  const engine::SessionStats st = a->stats();
  EXPECT_EQ(st.backend, "cuda");
  ASSERT_TRUE(st.device_bytes.has_value());
  EXPECT_GE(*st.device_bytes, uint64_t(sp.n_layer) * 256 * (sp.kv_dim_k() + sp.kv_dim_v()) * 2);
  a->truncate(4);
  ASSERT_TRUE(a->eval(std::span(prompt).subspan(4)).ok());
  auto lc = a->logits();
  EXPECT_TRUE(std::equal(lc.begin(), lc.end(), lb.begin(), lb.end()));
  // Errors, not crashes: a bad token id and a context overflow.
  const int32_t bad = int32_t(sp.n_vocab);
  EXPECT_FALSE(a->eval(std::span(&bad, 1)).ok());
  std::vector<int32_t> many(300, 1);
  EXPECT_FALSE(a->eval(many).ok());
}

// Decode steps past gemma4's sliding window: the captured step (every expert resident) and the segments (experts
// streamed through a few slots) replay at every position, so they mask the window as the steps launched one by one
// do, which know the position: the same logits bit for bit, each against the same model without graphs. A step
// captured after a prompt inside the window (where the mask masks nothing and was left out) had kept it out of every
// later step.
TEST(GpuForwardSession, GraphStepsMaskTheSlidingWindow) {
  DF_REQUIRE_GPU();
  for (const char* name : {"gemma4-moe-q8_0", "gemma4-e2b-q8_0"}) {
    DF_REQUIRE_SHARED(path, std::string("models/") + name + ".gguf");
    auto probe = open_gpu(path.string(), 256);
    ASSERT_TRUE(probe);
    const model::ModelSpec sp = probe->spec();
    ASSERT_GT(sp.sliding_window, 0u);
    std::vector<engine::GpuOptions> configs = {{}};
    if (sp.moe()) configs.push_back({.slots = 2 * sp.n_expert_used, .cpu_experts = false});
    for (engine::GpuOptions with : configs) {
      engine::GpuOptions without = with;
      without.decode_graph = false;
      auto ma = open_gpu(path.string(), 256, with);
      auto mb = open_gpu(path.string(), 256, without);
      ASSERT_TRUE(ma && mb);
      auto a = session_of(*ma);
      auto b = session_of(*mb);
      ASSERT_TRUE(a && b);
      const char* what = with.slots ? "streamed" : "resident";
      // A prompt inside the window, a step (the first capture), a prompt past the window, then steps.
      const std::vector<int32_t> first = {1, 2};
      std::vector<int32_t> past(sp.sliding_window + 6);
      for (size_t i = 0; i < past.size(); ++i) past[i] = int32_t((i * 7919 + 13) % sp.n_vocab);
      int32_t tok = 3;
      for (engine::Session* s : {&*a, &*b}) {
        ASSERT_TRUE(s->eval(first).ok());
        ASSERT_TRUE(s->eval(std::span(&tok, 1)).ok());
        ASSERT_TRUE(s->eval(past).ok());
      }
      sampling::Sampler greedy({.temp = 0});
      for (int step = 0; step < 8; ++step) {
        ASSERT_TRUE(a->eval(std::span(&tok, 1)).ok());
        ASSERT_TRUE(b->eval(std::span(&tok, 1)).ok());
        auto la = a->logits();
        auto lb = b->logits();
        ASSERT_TRUE(std::equal(la.begin(), la.end(), lb.begin(), lb.end()))
            << name << " " << what << " step at position " << a->n_past() - 1;
        tok = b->next_token(greedy, {});
      }
    }
  }
}

// Experts grouped by expert for batches: the same logits as one (token, slot) per block column, up to the f32
// summation order of the quantized experts' tensor-core tiles (tiles of 32 slots): top-1 on at least 90% of the
// positions and the logits within 2% of the largest magnitude, the GPU-vs-CPU bound (the same kind of difference,
// amplified where it flips a Q8_0 code of a later activation; a wrong tile is far off). Float experts take the
// 8-slot tiles, which repeat the per-slot operations exactly.
TEST(GpuForwardSession, GroupedExpertsGiveTheSameLogits) {
  DF_REQUIRE_GPU();
  for (const char* name : {"qwen3moe-q4_0", "qwen3moe-q8_0", "mixtral-q4_0"}) {
    DF_REQUIRE_SHARED(path, std::string("models/") + name + ".gguf");
    auto ma = open_gpu(path.string(), 256, {.grouped_experts = true});
    auto mb = open_gpu(path.string(), 256, {.grouped_experts = false});
    ASSERT_TRUE(ma && mb);
    auto a = session_of(*ma);
    auto b = session_of(*mb);
    ASSERT_TRUE(a && b);
    const int64_t V = ma->spec().n_vocab;
    std::vector<int32_t> prompt(40);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % V);
    ASSERT_TRUE(a->eval(prompt, true).ok());
    ASSERT_TRUE(b->eval(prompt, true).ok());
    auto la = a->logits();
    auto lb = b->logits();
    ASSERT_EQ(la.size(), lb.size());
    int64_t agree = 0;
    double max_diff = 0, max_mag = 0;
    for (size_t t = 0; t < prompt.size(); ++t) {
      agree += host_argmax(la.data() + t * V, V) == host_argmax(lb.data() + t * V, V);
      for (int64_t i = 0; i < V; ++i) {
        max_diff = std::max(max_diff, std::fabs(double(la[t * V + i]) - double(lb[t * V + i])));
        max_mag = std::max(max_mag, std::fabs(double(lb[t * V + i])));
      }
    }
    std::printf("[grouped-vs-per-slot] %-14s top-1 agree %lld of %zu, max abs diff %.4g (max |logit| %.3g)\n", name,
                (long long)agree, prompt.size(), max_diff, max_mag);
    EXPECT_GE(double(agree), 0.9 * double(prompt.size())) << name;
    EXPECT_LE(max_diff, 0.02 * max_mag + 1e-3) << name;
  }
}

// A store made by ingest uploads the same weights as the GGUF it came from (its stacked experts gathered from their
// records), so a session gives the same logits.
TEST(GpuForwardSession, UploadFromAStoreGivesTheSameLogits) {
  DF_REQUIRE_GPU();
  for (const char* name : {"qwen3moe-q4_0", "mixtral-q4_0", "llama-f16"}) {
    DF_REQUIRE_SHARED(path, std::string("models/") + name + ".gguf");
    const auto dir = temp_dir(std::string("gpu_store_") + name);
    auto ingested = store::ingest({.source = path.string(), .dir = dir.string(), .force = true});
    ASSERT_TRUE(ingested.ok()) << ingested.error().message;
    auto from_file = open_gpu(path.string(), 128);
    auto from_store = open_gpu(dir.string(), 128);
    ASSERT_TRUE(from_file && from_store);
    EXPECT_TRUE(from_store->files().from_store);
    auto a = session_of(*from_file);
    auto b = session_of(*from_store);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->stats().device_bytes, b->stats().device_bytes);
    const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7, 8, 9, 10, 11};
    ASSERT_TRUE(a->eval(prompt, true).ok());
    ASSERT_TRUE(b->eval(prompt, true).ok());
    auto la = a->logits();
    auto lb = b->logits();
    EXPECT_TRUE(std::equal(la.begin(), la.end(), lb.begin(), lb.end())) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GpuForward, ::testing::ValuesIn(kModels), model_param_name);
INSTANTIATE_TEST_SUITE_P(Models, GpuGold, ::testing::Combine(::testing::ValuesIn(kModels), ::testing::Bool()),
                         [](const auto& info) {
                           return model_param_name({std::get<0>(info.param), info.index}) +
                                  (std::get<1>(info.param) ? "_graph" : "_launches");
                         });

}  // namespace
}  // namespace df::test
