// Routed experts streamed through a small GPU tier: the same output as the fully resident GPU model. Gold cases of
// every shared MoE model greedily byte for byte (robust ones) with a few experts per layer on the GPU, from a RAM
// tier holding every expert and from one that reads them from disk under a RAM budget, with and without decode's CPU
// share and the next layer's reads ahead; prefill batches that need more experts than the tier holds (several
// groups per layer); the tier's admission under decode's cycle; and budgets.
#include <algorithm>
#include <cmath>

#include "diskformer/backend/cuda/plan.h"
#include "diskformer/cache/cuda/device_tier.h"
#include "diskformer/cache/host_tier.h"
#include "diskformer/cudart/check.h"
#include "diskformer/cudart/pinned.h"
#include "gpu/gpu_support.h"
#include "model/gold.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

const char* const kMoeModels[] = {"qwen3moe-q4_0",   "qwen3moe-q8_0",   "mixtral-q4_0",  "qwen3moe-q4_k_m",
                                  "qwen3moe-q3_k_m", "qwen3moe-iq4_xs", "mixtral-q5_k_m", "gemma4-moe-q8_0",
                                  "qwen35moe-q8_0"};

class GpuStream : public ::testing::TestWithParam<const char*> {};

// 2 x n_used slots (the fewest a budget may give): decode misses most experts, prefill runs in several groups.
TEST_P(GpuStream, GoldCasesMatchWithAFewExpertsPerLayer) {
  DF_REQUIRE_GPU();
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(path, "models/" + name + ".gguf");
  const auto cases = read_gold((shared_dir() / "models" / (name + ".gold.json")).string());
  auto probe = open_cpu(path.string(), 1024);
  ASSERT_TRUE(probe);
  const uint32_t slots = 2 * probe->spec().n_expert_used;
  // The CPU computes its share of decode's misses where its products round as the GPU's (the default); the other
  // types' share, forced on, is checked to run but not for the resident output (see cpu_experts_round_alike).
  const bool alike = cuda::cpu_experts_round_alike(probe->files().layouts);
  // Copies only; decode's missed experts shared with the CPU; and with reads ahead of the next layer's guesses.
  struct Config {
    std::optional<bool> cpu;
    bool prefetch;
  };
  for (const Config& k : {Config{false, false}, Config{std::nullopt, false}, Config{std::nullopt, true},
                          Config{true, false}}) {
    const bool cpu = k.cpu.value_or(alike), prefetch = k.prefetch;
    if (k.cpu && *k.cpu && alike) continue;  // the default already
    auto m = open_gpu(path.string(), 1024, {.slots = slots, .cpu_experts = k.cpu, .prefetch = prefetch});
    ASSERT_TRUE(m);
    char tag[96];
    std::snprintf(tag, sizeof tag, "gpu-stream-gold %s slots %u cpu share %d prefetch %d", name.c_str(), slots, cpu,
                  prefetch);
    const uint64_t cpu_count = expect_gold_cases(*m, *probe, cases, tag, /*check=*/alike || !cpu);
    const engine::ModelStats st = m->stats();
    ASSERT_TRUE(st.gpu.has_value());
    EXPECT_EQ(st.gpu_slots, slots);
    const cache::CacheStats& g = st.gpu->cache;
    std::printf("[gpu-stream-gold] %-14s cpu %d prefetch %d: experts on the CPU %llu, GPU hits %llu misses %llu, "
                "read ahead %llu (used %llu), %.1f MB copied at %.1f GB/s\n",
                name.c_str(), cpu, prefetch, (unsigned long long)cpu_count, (unsigned long long)(g.hits + g.late_hits),
                (unsigned long long)g.misses, (unsigned long long)g.prefetch_issued,
                (unsigned long long)g.prefetch_used, g.bytes_loaded / 1e6, st.gpu->load_GBps());
    EXPECT_GT(g.misses, 0u);
    if (cpu) {
      EXPECT_GT(cpu_count, 0u);  // the small models' experts are quick for the CPU: it takes a share
    } else {
      EXPECT_EQ(cpu_count, 0u);
    }
    if (prefetch) {
      EXPECT_GT(g.prefetch_issued, 0u);
    } else {
      EXPECT_EQ(g.prefetch_issued, 0u);
    }
  }
}

// The logits of a 40-token batch (several expert groups per layer with 2 x n_used slots) and of decode steps equal
// the resident model's up to the grouped products' f32 order: top-1 everywhere on these short runs is not
// guaranteed, so the bound is the grouped-vs-per-slot one (2% of the largest logit); the decode steps run the same
// kernels as resident decode on the same bytes, so they must agree exactly once the prompt's KV cache agrees --
// checked with a prompt of one token. The streamed steps replay their segments from graphs (forward.h); so they do
// with the next layer's guesses copied to the host in them (prefetch), and the same steps issued launch by launch
// agree too.
TEST_P(GpuStream, LogitsMatchTheResidentModel) {
  DF_REQUIRE_GPU();
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(path, "models/" + name + ".gguf");
  auto resident = open_gpu(path.string(), 256);
  ASSERT_TRUE(resident);
  const uint32_t slots = 2 * resident->spec().n_expert_used;
  auto gpu = open_gpu(path.string(), 256, {.slots = slots, .cpu_experts = false});
  ASSERT_TRUE(gpu);
  const int64_t V = resident->spec().n_vocab;

  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % V);
  auto a = session_of(*resident);
  auto b = session_of(*gpu);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->eval(prompt, true).ok());
  ASSERT_TRUE(b->eval(prompt, true).ok());
  auto la = a->logits();
  auto lb = b->logits();
  ASSERT_EQ(la.size(), lb.size());
  double max_diff = 0, max_mag = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double(la[i]) - double(lb[i])));
    max_mag = std::max(max_mag, std::fabs(double(la[i])));
  }
  std::printf("[gpu-stream-logits] %-14s 40-token batch: max abs diff %.4g (max |logit| %.3g)\n", name.c_str(),
              max_diff, max_mag);
  EXPECT_LE(max_diff, 0.02 * max_mag + 1e-3);

  auto ahead = open_gpu(path.string(), 256, {.slots = slots, .cpu_experts = false, .prefetch = true});
  auto direct = open_gpu(path.string(), 256, {.slots = slots, .decode_graph = false, .cpu_experts = false});
  ASSERT_TRUE(ahead && direct);
  auto c = session_of(*resident);
  auto d = session_of(*gpu);
  auto e = session_of(*ahead);
  auto f = session_of(*direct);
  ASSERT_TRUE(c && d && e && f);
  sampling::Sampler greedy({.temp = 0});
  int32_t tok = 1;
  for (int step = 0; step < 24; ++step) {
    for (engine::Session* s : {&*c, &*d, &*e, &*f}) ASSERT_TRUE(s->eval(std::span(&tok, 1)).ok());
    auto lc = c->logits();
    const char* what[] = {"segments replayed", "segments replayed, reads ahead", "launch by launch"};
    int i = 0;
    for (engine::Session* s : {&*d, &*e, &*f}) {
      auto l = s->logits();
      ASSERT_TRUE(std::equal(lc.begin(), lc.end(), l.begin(), l.end()))
          << name << " decode step " << step << ", streamed " << what[i];
      ++i;
    }
    tok = c->next_token(greedy, {});
  }
}

// Experts from disk: the RAM tier reads them under a budget just under the model size, the GPU tier pulls them from
// there. Copies only, the same greedy tokens as the resident GPU model, bit for bit; bytes were read from disk. With
// the CPU's share (by default where its products round as the GPU's) it still takes some from there, under the
// largest of those budgets that streams: the CPU takes only missed experts that RAM holds, and under a RAM tier
// smaller than a token's experts (gemma4's tiny model at 90%: 29 slots for 48 experts a token) it computed none. Its rows join the sum in another order, which can flip a near-tie of this random prompt, so its
// tokens are only printed (the gold cases check the share's output, GoldCasesMatchWithAFewExpertsPerLayer).
TEST_P(GpuStream, ExpertsFromDiskThroughTheRamTier) {
  DF_REQUIRE_GPU();
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(path, "models/" + name + ".gguf");
  auto resident = open_gpu(path.string(), 256);
  ASSERT_TRUE(resident);
  const uint64_t model_bytes = resident->plan().model_bytes;
  const uint32_t slots = 2 * resident->spec().n_expert_used;
  std::string why;  // the last open's refusal, or why its plan did not stream
  auto from_disk = [&](uint64_t budget, std::optional<bool> cpu) -> std::unique_ptr<engine::Model> {
    auto m = engine::Model::open(path.string(), {.n_ctx = 256, .ram_budget = budget, .backend = engine::Backend::kCuda,
                                                 .gpu = {.slots = slots, .cpu_experts = cpu}});
    why = !m.ok() ? m.error().message : !(*m)->ram_tier() ? "no RAM tier" : "RAM tier resident";
    if (!m.ok() || !(*m)->ram_tier() || (*m)->ram_tier()->resident()) return nullptr;
    (*m)->reset_stats();
    return std::move(*m);
  };
  const uint64_t budgets[] = {model_bytes * 9 / 10, model_bytes * 98 / 100, model_bytes * 99 / 100};
  std::unique_ptr<engine::Model> small;
  for (uint64_t b : budgets)
    if ((small = from_disk(b, false))) break;
  ASSERT_TRUE(small) << name << ": no RAM budget below the model size gave a streaming plan (" << why << ")";
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7, 8, 9, 10, 11};
  auto a = session_of(*resident);
  auto b = session_of(*small);
  ASSERT_TRUE(a && b);
  const std::vector<int32_t> want = greedy_gpu(*a, prompt, 24);
  EXPECT_EQ(greedy_gpu(*b, prompt, 24), want) << name;
  EXPECT_GT(small->stats().streamed_bytes_read, 0u);

  std::unique_ptr<engine::Model> shared;
  for (auto b = std::rbegin(budgets); b != std::rend(budgets) && !shared; ++b) shared = from_disk(*b, std::nullopt);
  ASSERT_TRUE(shared) << name << ": " << why;
  auto c = session_of(*shared);
  ASSERT_TRUE(c);
  const std::vector<int32_t> got = greedy_gpu(*c, prompt, 24);
  const size_t same = size_t(std::mismatch(got.begin(), got.end(), want.begin(), want.end()).first - got.begin());
  const engine::ModelStats st = shared->stats();
  EXPECT_GT(st.streamed_bytes_read, 0u);
  const bool alike = cuda::cpu_experts_round_alike(shared->files().layouts);
  if (alike) {
    EXPECT_GT(c->stats().cpu_experts, 0u) << name;
  }
  std::printf("[gpu-stream-disk] %-14s RAM tier %u slots: %.1f KB from disk, CPU computed %llu experts, "
              "%zu of 24 tokens as resident\n",
              name.c_str(), shared->ram_tier()->slots(), st.streamed_bytes_read / 1e3,
              (unsigned long long)c->stats().cpu_experts, same);
}

// Decode's access pattern: every (layer, expert) record in a cycle longer than the tier. Plain LRU would evict each
// record just before its next use (no hits on later cycles); admission by use count keeps a stable subset. The
// copied bytes are the records', and a read ahead turns the next acquire into a hit.
TEST(GpuStreamTier, ACycleLargerThanTheTierStillHits) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  auto host = engine::Model::open(path.string(), {.n_ctx = 64, .backend = engine::Backend::kCuda, .gpu = {.slots = 16}});
  ASSERT_TRUE(host.ok()) << host.error().message;
  const model::ModelSpec& spec = (*host)->spec();
  cache::RecordTier& ram = *(*host)->ram_tier();
  const uint32_t slots = 12;
  ASSERT_GT(spec.n_layer * spec.n_expert, 2 * slots);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  std::vector<std::vector<cache::PartPlace>> parts(spec.n_layer);
  for (uint32_t il = 0; il < spec.n_layer; ++il) {
    const model::ExpertLayout& x = (*host)->files().layouts.experts[il];
    parts[il] = {{x.gate_at, x.gate.bytes()}, {x.up_at, x.up.bytes()}, {x.down_at, x.down.bytes()}};
  }
  auto tier = cache::DeviceTier::create(ram, {.n_layers = spec.n_layer, .n_index = spec.n_expert, .slots = slots,
                                              .parts = parts, .consumer = stream, .spill = 2});
  ASSERT_TRUE(tier.ok()) << tier.error().message;
  auto cycle = [&] {
    for (uint32_t il = 0; il < spec.n_layer; ++il)
      for (int32_t e = 0; e < int32_t(spec.n_expert); ++e) {
        auto p = (*tier)->acquire(il, std::span(&e, 1));
        ASSERT_TRUE(p.ok());
        ASSERT_LT(p->slot(0), slots);
      }
  };
  cycle();
  (*tier)->reset_stats();
  for (int i = 0; i < 3; ++i) cycle();
  const cache::TierStats st = (*tier)->stats();
  std::printf("[gpu-stream-tier] %u slots, a cycle of %u records: %llu hits, %llu misses over 3 cycles\n", slots,
              spec.n_layer * spec.n_expert, (unsigned long long)st.cache.hits, (unsigned long long)st.cache.misses);
  EXPECT_GE(st.cache.hits, 3u * (slots / 2));
  EXPECT_EQ(st.cache.hits + st.cache.misses, 3u * spec.n_layer * spec.n_expert);
  EXPECT_EQ(st.cache.bytes_loaded, st.cache.misses * (parts[0][0].bytes + parts[0][1].bytes + parts[0][2].bytes));

  // The copied bytes are the record's: each part of an expert after an acquire (read ahead, or a miss) holds its
  // slice of the file. The parts of this model are multiples of 256 bytes, so a record comes in one copy; listed
  // down first they are not where the image has them, and come one by one.
  auto same_bytes = [&](cache::DeviceTier& t, const std::vector<std::vector<cache::PartPlace>>& places) {
    for (const int32_t e : {5, 6}) {
      if (e == 5) t.prefetch(1, std::span(&e, 1));
      auto p = t.acquire(1, std::span(&e, 1));
      ASSERT_TRUE(p.ok());
      if (e == 5) {
        EXPECT_GE(t.stats().cache.prefetch_used, 1u);
      }
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      auto want = ram.acquire(1, std::span(&e, 1));
      ASSERT_TRUE(want.ok());
      for (size_t part = 0; part < places[1].size(); ++part) {
        std::vector<uint8_t> got(places[1][part].bytes);
        ASSERT_EQ(cudaMemcpy(got.data(), t.plane(part) + uint64_t(p->slot(0)) * t.stride(part), got.size(),
                             cudaMemcpyDeviceToHost),
                  cudaSuccess);
        EXPECT_TRUE(std::equal(got.begin(), got.end(), want->data(0) + places[1][part].offset))
            << "expert " << e << " part " << part;
      }
      want->release();
      p->release();
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  };
  ASSERT_EQ(parts[1][0].bytes % 256, 0u);
  same_bytes(**tier, parts);
  tier->reset();
  std::vector<std::vector<cache::PartPlace>> down_first = parts;
  for (auto& l : down_first) std::rotate(l.begin(), l.begin() + 2, l.end());
  auto apart = cache::DeviceTier::create(ram, {.n_layers = spec.n_layer, .n_index = spec.n_expert, .slots = slots,
                                               .parts = down_first, .consumer = stream});
  ASSERT_TRUE(apart.ok()) << apart.error().message;
  same_bytes(**apart, down_first);
  apart->reset();
  cudaStreamDestroy(stream);
}

// Under --gpu-budget: refused with the numbers when too small; otherwise the tier takes what is left and the device
// memory in use stays within the budget.
TEST(GpuStreamBudget, OpensWithinABudget) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  auto tiny = engine::Model::open(path.string(), {.n_ctx = 256, .backend = engine::Backend::kCuda,
                                                  .gpu = {.budget = 64ull << 20, .max_batch = 64}});
  ASSERT_FALSE(tiny.ok());
  std::printf("[gpu-stream-budget] refusal: %s\n", tiny.error().message.c_str());
  EXPECT_NE(tiny.error().message.find("too small"), std::string::npos);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  const uint64_t base = cuda::device_memory_used();
  // The context and the resident part, plus room for a few dozen slots.
  const uint64_t budget = base + (200ull << 20);
  auto g = engine::Model::open(path.string(), {.n_ctx = 256, .backend = engine::Backend::kCuda,
                                               .gpu = {.budget = budget, .max_batch = 64}});
  ASSERT_TRUE(g.ok()) << g.error().message;
  std::printf("[gpu-stream-budget] budget %.1f MiB: %s\n", budget / 1048576.0, (*g)->describe().c_str());
  auto s = session_of(**g);
  ASSERT_TRUE(s);
  const std::vector<int32_t> prompt(100, 5);
  ASSERT_TRUE(s->eval(prompt).ok());
  EXPECT_LE(cuda::device_memory_used(), budget);
  const engine::ModelStats st = (*g)->stats();
  if (st.gpu) {
    EXPECT_GE(st.gpu_slots, 2 * (*g)->spec().n_expert_used);
  }
}

// The K-quant and IQ4 files (records of mixed types, layers of different record sizes) and gemma4's experts (gate and
// up fused in one tensor, GeGLU, a scale per expert) under the smallest budget
// the GPU plan accepts, the one its refusal of a smaller budget names ("= <bytes> at least"), or the first MiB above
// it that a second measurement of the CUDA context accepts (a whole model here is about 10 MiB: a wider margin
// would hold every expert): the gold cases, robust ones byte for byte or parting from the CPU engine at a near-tie.
class GpuKQuantBudget : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuKQuantBudget, GoldCasesMatchUnderTheSmallestAcceptedBudget) {
  DF_REQUIRE_GPU();
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(path, "models/" + name + ".gguf");
  const auto cases = read_gold((shared_dir() / "models" / (name + ".gold.json")).string());
  const engine::GpuOptions small{.budget = 64ull << 20};
  auto tiny = engine::Model::open(path.string(), {.n_ctx = 1024, .backend = engine::Backend::kCuda, .gpu = small});
  ASSERT_FALSE(tiny.ok());
  const std::string& why = tiny.error().message;
  const size_t at = why.rfind(" bytes) at least"), open = why.rfind('(', at);
  ASSERT_TRUE(at != std::string::npos && open != std::string::npos) << why;
  const uint64_t need = std::stoull(why.substr(open + 1, at - open - 1));
  std::printf("[gpu-kquant-budget] %-16s smallest budget %.1f MiB (from: %s)\n", name.c_str(), need / 1048576.0,
              why.c_str());
  uint64_t budget = 0;
  auto m = open_at_smallest_budget(path.string(), 1024, need, &budget);
  ASSERT_TRUE(m);
  auto cpu = open_cpu(path.string(), 1024);
  ASSERT_TRUE(cpu);
  const engine::ModelStats st0 = m->stats();
  std::printf("[gpu-kquant-budget] %-16s %s\n", name.c_str(), m->describe().c_str());
  expect_gold_cases(*m, *cpu, cases, "gpu-kquant-budget " + name);
  EXPECT_LE(cuda::device_memory_used(), budget);
  EXPECT_GE(st0.gpu_slots, 2 * m->spec().n_expert_used);
}

INSTANTIATE_TEST_SUITE_P(Models, GpuStream, ::testing::ValuesIn(kMoeModels), model_param_name);
INSTANTIATE_TEST_SUITE_P(Models, GpuKQuantBudget,
                         ::testing::Values("qwen3moe-q4_k_m", "qwen3moe-q3_k_m", "qwen3moe-iq4_xs", "mixtral-q5_k_m",
                                           "gemma4-moe-q8_0"),
                         model_param_name);

// gemma4 E2B under the smallest budget it accepts (the one its refusal of a small budget names): the per-layer
// embedding table in pinned host RAM, its rows read by the GPU, and the gold cases as resident.
// E2B's per-layer embedding table off the GPU: its rows through the GPU row cache, at the smallest budget (the
// cache then holds a batch's rows; asked for, since this small model's table is close to a batch's rows and the
// measured CUDA context decides between the two) and with a few hundred rows over a RAM row cache under a RAM budget.
TEST(GpuGemma4, PerLayerTableThroughTheGpuRowCacheUnderTheSmallestBudget) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, "models/gemma4-e2b-q8_0.gguf");
  const auto cases = read_gold((shared_dir() / "models/gemma4-e2b-q8_0.gold.json").string());
  auto tiny = engine::Model::open(path.string(), {.n_ctx = 1024, .backend = engine::Backend::kCuda,
                                                  .gpu = {.budget = 64ull << 20}});
  ASSERT_FALSE(tiny.ok());
  const std::string& why = tiny.error().message;
  const size_t needs = why.find("it needs "), open = why.find('(', needs), at = why.find(" bytes)", open);
  ASSERT_TRUE(needs != std::string::npos && open != std::string::npos && at != std::string::npos) << why;
  EXPECT_NE(why.find("per-layer embeddings through 512 GPU rows"), std::string::npos) << why;
  const uint64_t need = std::stoull(why.substr(open + 1, at - open - 1));
  auto cpu = open_cpu(path.string(), 1024);
  ASSERT_TRUE(cpu);
  {
    auto m = open_at_smallest_budget(path.string(), 1024, need, nullptr, {.row_slots = 512});
    ASSERT_TRUE(m);
    std::printf("[gpu-gemma4] %s\n", m->describe().c_str());
    EXPECT_NE(m->describe().find("per-layer embeddings through"), std::string::npos);
    expect_gold_cases(*m, *cpu, cases, "gpu-gemma4");
    const engine::ModelStats st = m->stats();
    ASSERT_TRUE(st.gpu_rows.has_value());
    EXPECT_GT(st.gpu_rows->cache.lookups(), 0u);
    std::printf("[gpu-gemma4] GPU rows: %u, hit rate %.3f\n", st.gpu_row_slots, st.gpu_rows->cache.hit_rate());
  }
  // 300 rows on the GPU in batches of 64, over a RAM row cache under a small RAM budget: rows leave the GPU and come
  // back from RAM or disk.
  auto probe = engine::Model::open(path.string(), {.n_ctx = 1024, .ram_budget = 64ull << 20});
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  const uint64_t ram = (*probe)->plan().min_budget();
  probe->reset();
  auto m = open_gpu(path.string(), 1024, {.budget = need + (64ull << 20), .row_slots = 300, .max_batch = 64}, ram);
  ASSERT_TRUE(m);
  std::printf("[gpu-gemma4-rows] %s\n", m->describe().c_str());
  expect_gold_cases(*m, *cpu, cases, "gpu-gemma4-rows");
  const engine::ModelStats st = m->stats();
  ASSERT_TRUE(st.gpu_rows.has_value() && st.rows.has_value());
  EXPECT_EQ(st.gpu_row_slots, 300u);
  EXPECT_GT(st.gpu_rows->cache.evictions, 0u);
  EXPECT_GT(st.rows->cache.misses, 0u);
}

}  // namespace
}  // namespace df::test
