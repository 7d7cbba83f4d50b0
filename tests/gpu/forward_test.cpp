// The GPU forward pass against the CPU engine on every shared model: logits of a prompt and of greedy decode steps
// (max abs difference and top-1 agreement printed), and greedy generation of the gold cases (robust ones byte for
// byte, the others report their common prefix), with and without the decode CUDA graph.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "diskformer/backend/cuda/gpu_forward.h"
#include "gpu/gpu_support.h"
#include "model/gold.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

const char* const kModels[] = {"qwen3moe-q4_0", "qwen3moe-q8_0", "qwen3-q4_0", "llama-f16", "mixtral-q4_0"};

int32_t host_argmax(const float* x, int64_t n) { return int32_t(std::max_element(x, x + n) - x); }

struct Loaded {
  std::unique_ptr<engine::Model> host;
  std::unique_ptr<cuda::GpuModel> gpu;
};

Loaded load(const std::filesystem::path& path, uint32_t n_ctx) {
  Loaded l;
  auto host = engine::Model::open(path.string(), {.n_ctx = n_ctx, .threads = 0});
  EXPECT_TRUE(host.ok()) << host.error().message;
  if (!host.ok()) return l;
  l.host = std::move(*host);
  auto gpu = cuda::GpuModel::upload(l.host->spec(), l.host->weights());
  EXPECT_TRUE(gpu.ok()) << gpu.error().message;
  if (gpu.ok()) l.gpu = std::move(*gpu);
  return l;
}

class GpuForward : public ::testing::TestWithParam<const char*> {};

// Prompt logits at every position, then 16 greedy steps (the CPU's choice fed to both). Top-1 must agree on at
// least 90% of positions (near-ties may flip), and the logits must be close: max abs difference <= 2% of the
// largest logit magnitude (summation orders and the f16 accumulator differ; a wrong kernel is far off).
TEST_P(GpuForward, LogitsMatchTheCpuEngine) {
  DF_REQUIRE_GPU();
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(path, "models/" + name + ".gguf");
  const auto cases = read_gold((shared_dir() / "models" / (name + ".gold.json")).string());
  ASSERT_FALSE(cases.empty());
  Loaded m = load(path, 512);
  ASSERT_TRUE(m.gpu);
  const model::ModelSpec& spec = m.host->spec();
  const int64_t V = spec.n_vocab;

  model::Forward cpu(spec, m.host->weights(), m.host->context());
  model::KvCache kv(spec, 512);
  auto gs = cuda::GpuSession::create(*m.gpu, {.n_ctx = 512, .max_batch = 7});  // 7: prompts span several batches
  ASSERT_TRUE(gs.ok()) << gs.error().message;
  cuda::GpuSession& gpu = **gs;

  std::vector<int32_t> prompt = cases[0].prompt_ids;
  ASSERT_TRUE(cpu.run(prompt, kv, true).ok());
  ASSERT_TRUE(gpu.eval(prompt, true).ok());
  std::vector<float> want = cpu.logits();
  std::vector<float> got(gpu.logits().begin(), gpu.logits().end());
  ASSERT_EQ(got.size(), want.size());

  int64_t positions = int64_t(prompt.size()), agree = 0;
  double max_diff = 0, max_mag = 0;
  auto compare = [&](const float* g, const float* w) {
    agree += host_argmax(g, V) == host_argmax(w, V);
    for (int64_t i = 0; i < V; ++i) {
      max_diff = std::max(max_diff, std::fabs(double(g[i]) - double(w[i])));
      max_mag = std::max(max_mag, std::fabs(double(w[i])));
    }
  };
  for (size_t t = 0; t < prompt.size(); ++t) compare(got.data() + t * V, want.data() + t * V);
  EXPECT_EQ(gpu.argmax(), host_argmax(got.data() + (prompt.size() - 1) * V, V));

  for (int step = 0; step < 16; ++step) {
    const int32_t next = host_argmax(cpu.logits().data() + (cpu.logits().size() / V - 1) * V, V);
    ASSERT_TRUE(cpu.run(std::span(&next, 1), kv).ok());
    ASSERT_TRUE(gpu.eval(std::span(&next, 1)).ok());
    auto gl = gpu.logits();
    ASSERT_EQ(int64_t(gl.size()), V);
    compare(gl.data(), cpu.logits().data());
    EXPECT_EQ(gpu.argmax(), host_argmax(gl.data(), V)) << "step " << step;
    ++positions;
  }
  std::printf("[gpu-vs-cpu] %-14s positions %lld, top-1 agree %lld (%.1f%%), max abs diff %.4g (max |logit| %.3g)\n",
              name.c_str(), (long long)positions, (long long)agree, 100.0 * agree / positions, max_diff, max_mag);
  EXPECT_GE(double(agree), 0.9 * double(positions));
  EXPECT_LE(max_diff, 0.02 * max_mag + 1e-3);
}

// (model, decode through the CUDA graph): a failing graph capture shows as its own failure.
class GpuGold : public ::testing::TestWithParam<std::tuple<const char*, bool>> {};

TEST_P(GpuGold, GreedyMatchesLlamaCpp) {
  DF_REQUIRE_GPU();
  const std::string name = std::get<0>(GetParam());
  const bool graph = std::get<1>(GetParam());
  DF_REQUIRE_SHARED(path, "models/" + name + ".gguf");
  const auto cases = read_gold((shared_dir() / "models" / (name + ".gold.json")).string());
  Loaded m = load(path, 1024);
  ASSERT_TRUE(m.gpu);
  PieceDecoder pieces(m.host->file());
  for (const auto& c : cases) {
    auto s = cuda::GpuSession::create(*m.gpu, {.n_ctx = 1024, .decode_graph = graph});
    ASSERT_TRUE(s.ok()) << s.error().message;
    const auto ids = greedy(**s, c.prompt_ids, c.n_predict);
    std::string text;
    for (int32_t id : ids) text += pieces.piece(id);
    const size_t common = common_prefix(text, c.completion);
    std::printf("[gpu-gold] %-14s graph=%d robust=%d common prefix %zu/%zu bytes  prompt \"%s\"\n", name.c_str(),
                graph, c.robust, common, c.completion.size(), c.prompt.substr(0, 40).c_str());
    if (c.robust) {
      EXPECT_EQ(text, c.completion) << name << " graph " << graph << " prompt: " << c.prompt;
    }
  }
}

// A session reused after truncate() recomputes the dropped positions: same logits as a fresh session, and the
// graph replay gives the same logits as the plain launches (both run the same kernels).
TEST(GpuForwardSession, TruncateAndGraphReplayAgreeWithAFreshSession) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  Loaded m = load(path, 256);
  ASSERT_TRUE(m.gpu);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  // Experts per (token, slot) in batches too: the decode steps' fused expert kernels repeat those products
  // exactly, while grouped batches may sum in another order (the tensor-core tiles).
  auto a = cuda::GpuSession::create(*m.gpu, {.n_ctx = 256, .decode_graph = true, .grouped_experts = false});
  auto b = cuda::GpuSession::create(*m.gpu, {.n_ctx = 256, .decode_graph = false, .grouped_experts = false});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->eval(std::span(prompt).first(5)).ok());
  for (int i = 5; i < 10; ++i) ASSERT_TRUE((*a)->eval(std::span(&prompt[i], 1)).ok());  // graph steps
  ASSERT_TRUE((*b)->eval(prompt).ok());
  auto la = (*a)->logits();
  auto lb = (*b)->logits();
  EXPECT_TRUE(std::equal(la.begin(), la.end(), lb.begin(), lb.end()));
  EXPECT_EQ((*a)->n_past(), 10u);
  // At least the KV cache: n_layer * n_ctx * (kv_dim_k + kv_dim_v) f16 values.
  const auto& sp = m.host->spec();
  EXPECT_GE((*a)->device_bytes(), uint64_t(sp.n_layer) * 256 * (sp.kv_dim_k() + sp.kv_dim_v()) * 2);
  (*a)->truncate(4);
  ASSERT_TRUE((*a)->eval(std::span(prompt).subspan(4)).ok());
  auto lc = (*a)->logits();
  EXPECT_TRUE(std::equal(lc.begin(), lc.end(), lb.begin(), lb.end()));
  // Errors, not crashes: a bad token id and a context overflow.
  const int32_t bad = int32_t(m.host->spec().n_vocab);
  EXPECT_FALSE((*a)->eval(std::span(&bad, 1)).ok());
  std::vector<int32_t> many(300, 1);
  EXPECT_FALSE((*a)->eval(many).ok());
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
    Loaded m = load(path, 256);
    ASSERT_TRUE(m.gpu);
    std::vector<int32_t> prompt(40);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % m.host->spec().n_vocab);
    auto a = cuda::GpuSession::create(*m.gpu, {.n_ctx = 256, .grouped_experts = true});
    auto b = cuda::GpuSession::create(*m.gpu, {.n_ctx = 256, .grouped_experts = false});
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE((*a)->eval(prompt, true).ok());
    ASSERT_TRUE((*b)->eval(prompt, true).ok());
    auto la = (*a)->logits();
    auto lb = (*b)->logits();
    ASSERT_EQ(la.size(), lb.size());
    const int64_t V = m.host->spec().n_vocab;
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

// Uploading from a host model that streams its experts or layers through a small RAM pool (experts handed out a
// few at a time) gives the same GPU weights, so the same logits, as uploading from a fully resident one.
TEST(GpuForwardSession, UploadFromAStreamingHostModelGivesTheSameLogits) {
  DF_REQUIRE_GPU();
  for (const char* name : {"qwen3moe-q4_0", "mixtral-q4_0", "llama-f16"}) {
    DF_REQUIRE_SHARED(path, std::string("models/") + name + ".gguf");
    Loaded full = load(path, 128);
    ASSERT_TRUE(full.gpu);
    const uint64_t model_bytes = full.host->weights().plan().model_bytes;
    std::unique_ptr<engine::Model> small;
    // The shared models are mostly embeddings and output head, which stay resident: only budgets just under the
    // model's size leave room for streaming slots.
    for (uint64_t budget : {model_bytes / 2, model_bytes * 9 / 10, model_bytes * 98 / 100, model_bytes * 99 / 100}) {
      auto m = engine::Model::open(path.string(), {.n_ctx = 128, .ram_budget = budget});
      if (m.ok() && (*m)->weights().plan().slots > 0) {
        small = std::move(*m);
        break;
      }
    }
    ASSERT_TRUE(small) << name << ": no budget below the model size gave a streaming plan";
    auto gpu_small = cuda::GpuModel::upload(small->spec(), small->weights());
    ASSERT_TRUE(gpu_small.ok()) << gpu_small.error().message;
    EXPECT_EQ((*gpu_small)->device_bytes(), full.gpu->device_bytes());
    const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7, 8, 9, 10, 11};
    auto a = cuda::GpuSession::create(*full.gpu, {.n_ctx = 128});
    auto b = cuda::GpuSession::create(**gpu_small, {.n_ctx = 128});
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE((*a)->eval(prompt, true).ok());
    ASSERT_TRUE((*b)->eval(prompt, true).ok());
    auto la = (*a)->logits();
    auto lb = (*b)->logits();
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
