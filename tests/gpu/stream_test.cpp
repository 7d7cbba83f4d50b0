// Routed experts streamed through a small GPU expert cache: the same output as the fully resident GPU model.
// Gold cases of every shared MoE model greedily byte for byte (robust ones) with a few experts per layer on the GPU,
// from a host model in pinned RAM and from one that streams its experts from disk under a RAM budget; prefill
// batches that need more experts than the cache holds (several groups per layer); and the counters.
#include <algorithm>
#include <cmath>

#include "diskformer/backend/cuda/gpu_forward.h"
#include "diskformer/backend/cuda/gpu_load.h"
#include "diskformer/backend/cuda/pinned.h"
#include "gpu/gpu_support.h"
#include "model/gold.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

const char* const kMoeModels[] = {"qwen3moe-q4_0", "qwen3moe-q8_0", "mixtral-q4_0"};

std::unique_ptr<engine::Model> open_host(const std::filesystem::path& path, uint32_t n_ctx,
                                         std::optional<uint64_t> ram_budget = std::nullopt) {
  auto m = engine::Model::open(path.string(), {.n_ctx = n_ctx, .threads = 0, .ram_budget = ram_budget,
                                               .host_allocator = &cuda::pinned_host_allocator()});
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? std::move(*m) : nullptr;
}

std::unique_ptr<cuda::GpuModel> streamed(engine::Model& host, uint32_t slots) {
  auto g = cuda::GpuModel::upload(host.spec(), host.weights(), {.stream_experts = true});
  EXPECT_TRUE(g.ok()) << g.error().message;
  if (!g.ok()) return nullptr;
  Status st = (*g)->stream_experts(slots);
  EXPECT_TRUE(st.ok()) << st.error().message;
  return st.ok() ? std::move(*g) : nullptr;
}

class GpuStream : public ::testing::TestWithParam<const char*> {};

// 2 x n_used slots (the fewest a budget may give): decode misses most experts, prefill runs in several groups.
TEST_P(GpuStream, GoldCasesMatchWithAFewExpertsPerLayer) {
  DF_REQUIRE_GPU();
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(path, "models/" + name + ".gguf");
  const auto cases = read_gold((shared_dir() / "models" / (name + ".gold.json")).string());
  auto host = open_host(path, 1024);
  ASSERT_TRUE(host);
  const uint32_t slots = 2 * host->spec().n_expert_used;
  auto gpu = streamed(*host, slots);
  ASSERT_TRUE(gpu);
  ASSERT_NE(gpu->expert_cache(), nullptr);
  PieceDecoder pieces(host->file());
  // Also with decode's missed experts shared with the CPU.
  for (cpu::Context* cpu : {static_cast<cpu::Context*>(nullptr), &host->context()}) {
    uint64_t cpu_count = 0;
    for (const auto& c : cases) {
      auto s = cuda::GpuSession::create(*gpu, {.n_ctx = 1024, .cpu_experts = cpu});
      ASSERT_TRUE(s.ok()) << s.error().message;
      const auto ids = greedy(**s, c.prompt_ids, c.n_predict);
      cpu_count += (*s)->cpu_experts_computed();
      std::string text;
      for (int32_t id : ids) text += pieces.piece(id);
      std::printf("[gpu-stream-gold] %-14s slots %u cpu share %d robust=%d common prefix %zu/%zu bytes\n",
                  name.c_str(), slots, cpu != nullptr, c.robust, common_prefix(text, c.completion),
                  c.completion.size());
      if (c.robust) {
        EXPECT_EQ(text, c.completion) << name << " cpu share " << (cpu != nullptr) << " prompt: " << c.prompt;
      }
    }
    std::printf("[gpu-stream-gold] %-14s experts computed on the CPU: %llu\n", name.c_str(),
                (unsigned long long)cpu_count);
    if (cpu) {
      EXPECT_GT(cpu_count, 0u);  // the small models' experts are quick for the CPU: it takes a share
    }
  }
  const cuda::ExpertCacheStats st = gpu->expert_cache()->stats();
  std::printf("[gpu-stream-gold] %-14s hits %llu misses %llu, %.1f MB copied at %.1f GB/s\n", name.c_str(),
              (unsigned long long)(st.table.hits + st.table.late_hits), (unsigned long long)st.table.misses,
              st.table.bytes_loaded / 1e6, st.h2d_GBps());
  EXPECT_GT(st.table.misses, 0u);
  // Each miss copies one record: its three matrices, without the slot's alignment padding.
  const uint64_t slot_bytes = gpu->expert_cache()->slot_bytes();
  EXPECT_LE(st.table.bytes_loaded, st.table.misses * slot_bytes);
  EXPECT_GE(st.table.bytes_loaded, st.table.misses * (slot_bytes - 3 * 256));
}

// The logits of a 40-token batch (several expert groups per layer with 2 x n_used slots) and of decode steps equal
// the resident model's up to the grouped products' f32 order: top-1 everywhere on these short runs is not
// guaranteed, so the bound is the grouped-vs-per-slot one (2% of the largest logit); the decode steps run the same
// kernels as resident decode on the same bytes, so they must agree exactly once the prompt's KV cache agrees --
// checked with a prompt of one token.
TEST_P(GpuStream, LogitsMatchTheResidentModel) {
  DF_REQUIRE_GPU();
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(path, "models/" + name + ".gguf");
  auto host = open_host(path, 256);
  ASSERT_TRUE(host);
  auto resident = cuda::GpuModel::upload(host->spec(), host->weights());
  ASSERT_TRUE(resident.ok()) << resident.error().message;
  auto gpu = streamed(*host, 2 * host->spec().n_expert_used);
  ASSERT_TRUE(gpu);
  const int64_t V = host->spec().n_vocab;

  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % V);
  auto a = cuda::GpuSession::create(**resident, {.n_ctx = 256});
  auto b = cuda::GpuSession::create(*gpu, {.n_ctx = 256});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->eval(prompt, true).ok());
  ASSERT_TRUE((*b)->eval(prompt, true).ok());
  auto la = (*a)->logits();
  auto lb = (*b)->logits();
  ASSERT_EQ(la.size(), lb.size());
  double max_diff = 0, max_mag = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double(la[i]) - double(lb[i])));
    max_mag = std::max(max_mag, std::fabs(double(la[i])));
  }
  std::printf("[gpu-stream-logits] %-14s 40-token batch: max abs diff %.4g (max |logit| %.3g)\n", name.c_str(),
              max_diff, max_mag);
  EXPECT_LE(max_diff, 0.02 * max_mag + 1e-3);

  auto c = cuda::GpuSession::create(**resident, {.n_ctx = 256});
  auto d = cuda::GpuSession::create(*gpu, {.n_ctx = 256});
  ASSERT_TRUE(c.ok() && d.ok());
  int32_t tok = 1;
  for (int step = 0; step < 24; ++step) {
    ASSERT_TRUE((*c)->eval(std::span(&tok, 1)).ok());
    ASSERT_TRUE((*d)->eval(std::span(&tok, 1)).ok());
    auto lc = (*c)->logits();
    auto ld = (*d)->logits();
    ASSERT_TRUE(std::equal(lc.begin(), lc.end(), ld.begin(), ld.end())) << name << " decode step " << step;
    tok = (*c)->argmax();
  }
}

// Experts from disk: the host model streams them through a RAM pool (a budget just under the model size), the GPU
// cache pulls them from there. Same greedy tokens as the resident GPU model; bytes were read from disk.
TEST_P(GpuStream, ExpertsFromDiskThroughTheRamPool) {
  DF_REQUIRE_GPU();
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(path, "models/" + name + ".gguf");
  auto full = open_host(path, 256);
  ASSERT_TRUE(full);
  const uint64_t model_bytes = full->weights().plan().model_bytes;
  std::unique_ptr<engine::Model> small;
  for (uint64_t budget : {model_bytes * 9 / 10, model_bytes * 98 / 100, model_bytes * 99 / 100}) {
    auto m = engine::Model::open(path.string(), {.n_ctx = 256, .ram_budget = budget,
                                                 .host_allocator = &cuda::pinned_host_allocator()});
    if (m.ok() && (*m)->weights().plan().slots > 0) {
      small = std::move(*m);
      break;
    }
  }
  ASSERT_TRUE(small) << name << ": no RAM budget below the model size gave a streaming plan";
  auto resident = cuda::GpuModel::upload(full->spec(), full->weights());
  ASSERT_TRUE(resident.ok());
  auto gpu = streamed(*small, 2 * small->spec().n_expert_used);
  ASSERT_TRUE(gpu);
  small->weights().reset_stream_stats();
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7, 8, 9, 10, 11};
  auto a = cuda::GpuSession::create(**resident, {.n_ctx = 256});
  auto b = cuda::GpuSession::create(*gpu, {.n_ctx = 256});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(greedy(**a, prompt, 24), greedy(**b, prompt, 24)) << name;
  EXPECT_GT(small->weights().stats().streamed_bytes_read, 0u);
}

// Decode's access pattern: every (layer, expert) record in a cycle longer than the cache. Plain LRU would evict each
// record just before its next use (no hits on later cycles); admission by use count keeps a stable subset.
TEST(GpuStreamCache, ACycleLargerThanTheCacheStillHits) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  auto host = open_host(path, 64);
  ASSERT_TRUE(host);
  const model::ModelSpec& spec = host->spec();
  const uint32_t slots = 12;
  ASSERT_GT(spec.n_layer * spec.n_expert, 2 * slots);
  auto cache = cuda::GpuExpertCache::create(spec, host->weights(), slots);
  ASSERT_TRUE(cache.ok()) << cache.error().message;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto cycle = [&] {
    for (uint32_t il = 0; il < spec.n_layer; ++il)
      for (int32_t e = 0; e < int32_t(spec.n_expert); ++e) {
        int32_t slot = -1;
        ASSERT_TRUE((*cache)->acquire(il, std::span(&e, 1), std::span(&slot, 1), stream).ok());
        ASSERT_GE(slot, 0);
        ASSERT_LT(uint32_t(slot), slots);
        (*cache)->release(stream);
      }
  };
  cycle();
  (*cache)->reset_stats();
  for (int i = 0; i < 3; ++i) cycle();
  const cuda::ExpertCacheStats st = (*cache)->stats();
  std::printf("[gpu-stream-cache] %u slots, a cycle of %u records: %llu hits, %llu misses over 3 cycles\n", slots,
              spec.n_layer * spec.n_expert, (unsigned long long)st.table.hits, (unsigned long long)st.table.misses);
  EXPECT_GE(st.table.hits, 3u * (slots / 2));
  EXPECT_EQ(st.table.hits + st.table.misses, 3u * spec.n_layer * spec.n_expert);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
}

// load_gpu_model under a budget: refused with the numbers when too small; otherwise the cache takes what is left
// and the device memory in use stays within the budget.
TEST(GpuStreamBudget, LoadWithinABudget) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  auto host = open_host(path, 256);
  ASSERT_TRUE(host);
  auto tiny = cuda::load_gpu_model(*host, {.budget = 64ull << 20, .n_ctx = 256, .max_batch = 64});
  ASSERT_FALSE(tiny.ok());
  std::printf("[gpu-stream-budget] refusal: %s\n", tiny.error().message.c_str());
  EXPECT_NE(tiny.error().message.find("too small"), std::string::npos);
  const uint64_t base = cuda::device_memory_used();
  // The context and the resident part, plus room for a few dozen slots.
  const uint64_t budget = base + (200ull << 20);
  auto g = cuda::load_gpu_model(*host, {.budget = budget, .n_ctx = 256, .max_batch = 64});
  ASSERT_TRUE(g.ok()) << g.error().message;
  std::printf("[gpu-stream-budget] budget %.1f MiB: %s\n", budget / 1048576.0, g->describe().c_str());
  if (g->slots > 0) {
    EXPECT_GE(g->slots, 2 * host->spec().n_expert_used);
    auto s = cuda::GpuSession::create(*g->model, {.n_ctx = 256, .max_batch = 64});
    ASSERT_TRUE(s.ok());
    const std::vector<int32_t> prompt(100, 5);
    ASSERT_TRUE((*s)->eval(prompt).ok());
    EXPECT_LE(cuda::device_memory_used(), budget);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GpuStream, ::testing::ValuesIn(kMoeModels),
                         model_param_name);

}  // namespace
}  // namespace df::test
