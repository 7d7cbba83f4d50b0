// GPU tests skip with a message where no CUDA device is present (CI has none). Models open on the CUDA backend
// through the engine, as run and bench open them.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "diskformer/cudart/devices.h"
#include "diskformer/engine/model.h"
#include "diskformer/engine/session.h"
#include "diskformer/sampling/sampler.h"

#define DF_REQUIRE_GPU()                                                                   \
  do {                                                                                     \
    auto df_info_ = ::df::cuda::query_devices();                                           \
    if (df_info_.count == 0) GTEST_SKIP() << "no CUDA device: " << df_info_.why_none;      \
  } while (0)

namespace df::test {

// The model at `path` on the GPU (gpu: budget, slots, session options), or nullptr after a test failure.
inline std::unique_ptr<engine::Model> open_gpu(const std::string& path, uint32_t n_ctx, engine::GpuOptions gpu = {},
                                               std::optional<uint64_t> ram_budget = std::nullopt) {
  auto m = engine::Model::open(path, {.n_ctx = n_ctx, .ram_budget = ram_budget, .backend = engine::Backend::kCuda,
                                      .gpu = gpu});
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? std::move(m).value() : nullptr;
}

inline std::unique_ptr<engine::Model> open_cpu(const std::string& path, uint32_t n_ctx) {
  auto m = engine::Model::open(path, {.n_ctx = n_ctx, .threads = 0});
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? std::move(m).value() : nullptr;
}

// A session or a test failure (and an aborted test: the caller asserts on has_value()).
inline std::optional<engine::Session> session_of(engine::Model& m) {
  auto s = engine::Session::create(m);
  EXPECT_TRUE(s.ok()) << s.error().message;
  if (!s.ok()) return std::nullopt;
  return std::move(s).value();
}

// Greedy generation, one token per step as the gold files were made: the prompt, then n choices, each made on the
// device (the session's argmax kernel through next_token).
inline std::vector<int32_t> greedy_gpu(engine::Session& s, const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  sampling::Sampler greedy({.temp = 0});
  std::vector<int32_t> history = prompt;
  Status st = s.eval(prompt);
  EXPECT_TRUE(st.ok()) << st.error().message;
  for (int i = 0; i < n && st.ok(); ++i) {
    out.push_back(s.next_token(greedy, history));
    history.push_back(out.back());
    if (i + 1 < n) {
      st = s.eval(std::span(&out.back(), 1));
      EXPECT_TRUE(st.ok()) << st.error().message;
    }
  }
  return out;
}

// Where a GPU's greedy tokens part from the CPU engine's (which equals llama.cpp's CPU on the gold cases): the first
// differing step, the CPU's margin there between its token and the GPU's, and the largest difference between the
// two backends' logits at that step. A flip whose margin is below that difference is the backends' rounding at a
// near-tie; one above it is a wrong product.
struct Parting {
  size_t step = 0;
  float cpu_margin = 0;  // cpu[cpu's token] - cpu[gpu's token]
  float max_diff = 0;    // max over the vocabulary of |gpu - cpu| at that step
  bool near_tie() const { return cpu_margin <= max_diff; }
};

inline std::optional<Parting> parting(engine::Model& cpu_model, engine::Session& gpu, const std::vector<int32_t>& prompt,
                                      const std::vector<int32_t>& gpu_ids) {
  auto cpu = session_of(cpu_model);
  if (!cpu) return std::nullopt;
  const int64_t V = cpu_model.spec().n_vocab;
  gpu.truncate(0);
  if (!cpu->eval(prompt).ok() || !gpu.eval(prompt).ok()) return std::nullopt;
  for (size_t i = 0; i < gpu_ids.size(); ++i) {
    auto cl = cpu->logits(), gl = gpu.logits();
    const float* c = cl.data() + (int64_t(cl.size()) / V - 1) * V;
    const float* g = gl.data() + (int64_t(gl.size()) / V - 1) * V;
    const int32_t mine = int32_t(std::max_element(c, c + V) - c);
    if (mine != gpu_ids[i]) {
      Parting p{.step = i, .cpu_margin = c[mine] - c[gpu_ids[i]]};
      for (int64_t v = 0; v < V; ++v) p.max_diff = std::max(p.max_diff, std::fabs(g[v] - c[v]));
      return p;
    }
    if (!cpu->eval(std::span(&mine, 1)).ok() || !gpu.eval(std::span(&mine, 1)).ok()) return std::nullopt;
  }
  return std::nullopt;
}

// For a robust gold case whose GPU text differs: passes only where the GPU parts from the CPU engine at a near-tie,
// and says where and by how much.
inline void expect_near_tie(engine::Model& cpu_model, engine::Session& gpu, const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& gpu_ids, const std::string& what) {
  const auto p = parting(cpu_model, gpu, prompt, gpu_ids);
  ASSERT_TRUE(p.has_value()) << what << ": the text differs from the gold completion, the tokens from the CPU's not";
  std::printf("[near-tie] %s: parts from the CPU engine at step %zu, CPU margin %.4g, largest logit difference of "
              "the backends there %.4g\n", what.c_str(), p->step, p->cpu_margin, p->max_diff);
  EXPECT_TRUE(p->near_tie()) << what << ": parts from the CPU engine at step " << p->step << " by a margin of "
                             << p->cpu_margin << ", above the backends' logit difference " << p->max_diff;
}

}  // namespace df::test
