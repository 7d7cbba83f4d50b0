// Token selection on the GPU against the CPU sampler on the same logits: the top-k kernel keeps the set partial_sort
// keeps (ties toward the lower id), DeviceSampler draws the token Sampler::sample draws for every kind of setting
// (greedy, penalties, top-k, top-k off), and a CUDA session does so on a model's own logits. Timings are printed.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <random>

#include "diskformer/backend/cuda/device_sampler.h"
#include "diskformer/backend/cuda/select.h"
#include "diskformer/engine/generate.h"
#include "diskformer/engine/model.h"
#include "gpu/gpu_support.h"
#include "support/test_paths.h"
#include "support/tiny_model.h"

namespace df::test {
namespace {

using Cand = std::pair<float, int32_t>;

bool best_first(const Cand& a, const Cand& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Logits of a vocabulary: normal with spread 3, or on a coarse grid (many exact ties), with both zeros and -inf.
std::vector<float> make_logits(int64_t n, uint32_t seed, bool ties) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = ties ? std::round(d(rng) * 2.0f) / 2.0f : d(rng);
  if (n > 8) v[3] = -0.0f, v[4] = 0.0f, v[5] = -INFINITY;
  return v;
}

TEST(GpuSelect, TopKKeepsThePartialSortSet) {
  DF_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  int64_t bad_cases = 0;
  cuda::DeviceBuffer work(cuda::top_k_work_bytes());
  for (int64_t n : {int64_t(1), int64_t(33), int64_t(1000), int64_t(151936), int64_t(262144)})
    for (bool ties : {false, true})
      for (int32_t k : {1, 2, 40, 1000, 151936}) {
        if (k > n) continue;
        const auto x = make_logits(n, uint32_t(n * 7 + k), ties);
        std::vector<Cand> want;
        for (int64_t i = 0; i < n; ++i) want.push_back({x[size_t(i)], int32_t(i)});
        std::partial_sort(want.begin(), want.begin() + k, want.end(), best_first);
        want.resize(size_t(k));
        cuda::DeviceBuffer dx = cuda::to_device(x), dv(uint64_t(k) * 4), di(uint64_t(k) * 4);
        cuda::top_k({.x = dx.as<float>(), .n = n, .k = k, .values = dv.as<float>(), .ids = di.as<int32_t>(),
                     .work = work.data(), .stream = stream});
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        const auto v = cuda::to_host(dv.as<float>(), uint64_t(k));
        const auto id = cuda::to_host(di.as<int32_t>(), uint64_t(k));
        std::vector<Cand> got;
        for (int32_t i = 0; i < k; ++i) got.push_back({v[size_t(i)], id[size_t(i)]});
        std::sort(got.begin(), got.end(), best_first);
        int64_t mismatches = 0;
        for (int32_t i = 0; i < k; ++i)
          mismatches += got[size_t(i)].second != want[size_t(i)].second ||
                        std::memcmp(&got[size_t(i)].first, &want[size_t(i)].first, 4) != 0;
        bad_cases += mismatches > 0;
        EXPECT_EQ(mismatches, 0) << "n " << n << " k " << k << " ties " << ties;
      }
  // Time of one selection over Qwen3's vocabulary, the decode-time cost.
  const int64_t V = 151936;
  const auto x = make_logits(V, 99, false);
  cuda::DeviceBuffer dx = cuda::to_device(x);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  for (int32_t k : {1, 40, 1000}) {
    cuda::DeviceBuffer bv(uint64_t(k) * 4), bi(uint64_t(k) * 4);
    const int reps = 200;
    cudaEventRecord(e0, stream);
    for (int r = 0; r < reps; ++r)
      cuda::top_k({.x = dx.as<float>(), .n = V, .k = k, .values = bv.as<float>(), .ids = bi.as<int32_t>(),
                   .work = work.data(), .stream = stream});
    cudaEventRecord(e1, stream);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    std::printf("[gpu-select] top-k k=%-4d over %lld logits: %.1f us per call (%.1f GB/s of logits read once)\n", k,
                (long long)V, 1000.0 * ms / reps, double(V) * 4 / (1e-3 * ms / reps) / 1e9);
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  std::printf("[gpu-select] top-k cases with mismatches: %lld\n", (long long)bad_cases);
  cudaStreamDestroy(stream);
}

const sampling::SamplingParams kSettings[] = {
    {.temp = 0.0f, .seed = 1},                                                          // argmax kernel
    {.temp = 0.0f, .repeat_penalty = 1.5f, .seed = 2},                                  // penalty + top-1
    {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 3},            // the defaults
    {.temp = 1.3f, .top_k = 40, .top_p = 1.0f, .min_p = 0.0f, .repeat_penalty = 1.3f, .seed = 4},
    {.temp = 1.0f, .top_k = 2000, .top_p = 0.9f, .min_p = 0.0f, .repeat_penalty = 0.8f, .repeat_last_n = -1,
     .seed = 5},
    {.temp = 1.0f, .top_k = 0, .top_p = 0.9f, .min_p = 0.02f, .repeat_penalty = 1.1f, .seed = 6},  // full row
    // --ignore-eos's bans, among the strongest candidates: a copy of the row with them at -inf on every path.
    {.temp = 0.0f, .seed = 7, .banned = {17, 151935, 5}},
    {.temp = 0.0f, .repeat_penalty = 1.5f, .seed = 8, .banned = {151935, 200000, -3}},
    {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 9, .banned = {3, 4, 17, 151935}},
    {.temp = 1.0f, .top_k = 0, .top_p = 0.9f, .min_p = 0.0f, .seed = 10, .banned = {17}},
};

std::string describe(const sampling::SamplingParams& p) {
  char b[160];
  std::snprintf(b, sizeof b, "temp %.2f top_k %d top_p %.2f min_p %.2f penalty %.2f last_n %d", p.temp, p.top_k,
                p.top_p, p.min_p, p.repeat_penalty, p.repeat_last_n);
  return b;
}

TEST(GpuSelect, DeviceSamplerDrawsWhatTheCpuSamplerDraws) {
  DF_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const int64_t V = 151936;
  for (bool ties : {false, true})
    for (const auto& p : kSettings) {
      sampling::Sampler cpu(p), gpu(p);
      cuda::DeviceSampler ds;
      std::vector<int32_t> history = {3, 4, 5, 17, 17, 151935};
      int64_t differ = 0, steps = 0;
      double gpu_s = 0;
      for (int round = 0; round < 4; ++round) {
        auto x = make_logits(V, uint32_t(round * 31 + (ties ? 7 : 0)), ties);
        // Make recent tokens strong candidates, so that the penalty decides between them.
        for (size_t i = 0; i < history.size(); ++i) x[size_t(history[i])] = ties ? 9.0f : 8.0f + 0.1f * float(i);
        cuda::DeviceBuffer dx = cuda::to_device(x);
        for (int step = 0; step < 25; ++step, ++steps) {
          const auto t0 = std::chrono::steady_clock::now();
          const int32_t g = ds.sample(gpu, dx.as<float>(), V, stream, history);
          gpu_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          const int32_t c = cpu.sample(x, history);
          differ += g != c;
          history.push_back(c);
        }
      }
      std::printf("[gpu-sample] ties=%d %-62s %lld/%lld differ, %.1f us per GPU choice\n", ties, describe(p).c_str(),
                  (long long)differ, (long long)steps, 1e6 * gpu_s / double(steps));
      EXPECT_EQ(differ, 0) << describe(p) << " ties " << ties;
    }
  cudaStreamDestroy(stream);
}

// A banned id is never chosen, even where it is the best by far: greedy (argmax over the banned copy), with a
// penalty, and drawn after a top-k cut; the choice is the CPU sampler's.
TEST(GpuSelect, BannedTokensAreNeverChosen) {
  DF_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const int64_t V = 32000;
  auto x = make_logits(V, 5, false);
  x[2] = 50.0f;    // an end-of-generation id far ahead of the rest
  x[7] = 40.0f;    // the next best, also banned
  x[900] = 30.0f;  // what greedy must choose
  const cuda::DeviceBuffer dx = cuda::to_device(x);
  const std::vector<int32_t> history = {2, 900};
  for (const sampling::SamplingParams& p :
       {sampling::SamplingParams{.temp = 0.0f, .banned = {2, 7}},
        sampling::SamplingParams{.temp = 0.0f, .repeat_penalty = 0.5f, .banned = {7, 2}},
        sampling::SamplingParams{.temp = 2.0f, .top_k = 3, .top_p = 1.0f, .min_p = 0.0f, .seed = 3, .banned = {2, 7}}}) {
    sampling::Sampler cpu(p), gpu(p);
    cuda::DeviceSampler ds;
    for (int step = 0; step < 50; ++step) {
      const int32_t g = ds.sample(gpu, dx.as<float>(), V, stream, history);
      EXPECT_NE(g, 2) << describe(p);
      EXPECT_NE(g, 7) << describe(p);
      EXPECT_EQ(g, cpu.sample(x, history)) << describe(p);
      if (p.temp == 0.0f) {
        EXPECT_EQ(g, 900);
      }
    }
  }
  cudaStreamDestroy(stream);
}

// engine::generate with ignore_eos on a CUDA session, where the end-of-generation token is the first greedy one: the
// tokens chosen on the device are the argmax of the session's own logits with that token at -inf, step by step.
TEST(GpuSelect, GenerateWithIgnoreEosNeverChoosesTheEos) {
  DF_REQUIRE_GPU();
  const std::string path = (temp_dir("gpu_ignore_eos") / "m.gguf").string();
  ASSERT_TRUE(write_tiny_model(path, TinyModel{}).ok());
  auto m = open_gpu(path, 128);
  ASSERT_TRUE(m);
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3};
  auto probe = session_of(*m);
  ASSERT_TRUE(probe && probe->eval(prompt).ok());
  const int32_t eos = sampling::argmax(probe->logits());
  engine::GenerateHooks hooks;
  std::vector<int32_t> printed;
  hooks.is_eog = [&](int32_t id) { return id == eos; };
  hooks.on_token = [&](int32_t id) { printed.push_back(id); };
  auto s = session_of(*m);
  ASSERT_TRUE(s);
  std::vector<int32_t> history;
  auto st = engine::generate(*s, prompt, {.n_predict = 16, .ignore_eos = true, .sampling = {.temp = 0}}, hooks, history);
  ASSERT_TRUE(st.ok()) << st.error().message;
  auto by_hand = session_of(*m);
  ASSERT_TRUE(by_hand && by_hand->eval(prompt).ok());
  std::vector<int32_t> want;
  for (int i = 0; i < 16; ++i) {
    std::vector<float> l(by_hand->logits().begin(), by_hand->logits().end());
    l[size_t(eos)] = -INFINITY;
    want.push_back(sampling::argmax(l));
    if (i + 1 < 16) {
      ASSERT_TRUE(by_hand->eval(std::span(&want.back(), 1)).ok());
    }
  }
  EXPECT_EQ(printed, want);
  EXPECT_EQ(std::count(printed.begin(), printed.end(), eos), 0);
  // Drawn on the device's top-k, never either.
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    auto t = session_of(*m);
    ASSERT_TRUE(t);
    printed.clear();
    history.clear();
    engine::GenerateOptions o{.n_predict = 24, .ignore_eos = true};
    o.sampling = {.temp = 1.5f, .top_k = 8, .top_p = 1.0f, .min_p = 0.0f, .seed = seed};
    ASSERT_TRUE(engine::generate(*t, prompt, o, hooks, history).ok());
    EXPECT_EQ(std::count(printed.begin(), printed.end(), eos), 0) << "seed " << seed;
  }
}

// On a real model's logits (prompt split into batches, then decode steps through the graph): a CUDA session's
// choice equals the CPU sampler's on the logits the session copies back.
TEST(GpuSelect, CudaSessionChoosesAsTheSamplerOnItsLogits) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  auto m = open_gpu(path.string(), 256, {.max_batch = 4, .decode_graph = true});
  ASSERT_TRUE(m);
  const std::vector<int32_t> prompt = {1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366};
  for (const auto& p : kSettings) {
    auto d = session_of(*m);
    ASSERT_TRUE(d);
    sampling::Sampler a(p), b(p);
    std::vector<int32_t> history = prompt;
    ASSERT_TRUE(d->eval(prompt).ok());
    int differ = 0;
    for (int step = 0; step < 24; ++step) {
      const std::vector<float> logits(d->logits().begin(), d->logits().end());
      const int32_t want = b.sample(logits, history);
      const int32_t got = d->next_token(a, history);
      differ += got != want;
      history.push_back(want);
      ASSERT_TRUE(d->eval(std::span(&want, 1)).ok());
    }
    EXPECT_EQ(differ, 0) << describe(p);
    const auto st = d->stats();
    EXPECT_EQ(st.backend, "cuda");
    ASSERT_TRUE(st.device_bytes && st.device_used_peak);
    EXPECT_GE(*st.device_used_peak, *st.device_bytes);  // the driver counts this run's allocations and more
    EXPECT_EQ(d->n_past(), uint32_t(prompt.size() + 24));
  }
}

}  // namespace
}  // namespace df::test
