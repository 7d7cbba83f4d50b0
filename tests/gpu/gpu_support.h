// GPU tests skip with a message where no CUDA device is present (CI has none). Models open on the CUDA backend
// through the engine, as run and bench open them.
#pragma once
#include <gtest/gtest.h>

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

}  // namespace df::test
