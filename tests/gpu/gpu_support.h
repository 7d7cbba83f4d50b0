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
#include "model/gold.h"

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
// device (the session's argmax kernel through next_token). banned: ids never chosen (--ignore-eos bans the
// end-of-generation tokens).
inline std::vector<int32_t> greedy_gpu(engine::Session& s, const std::vector<int32_t>& prompt, int n,
                                       std::vector<int32_t> banned = {}) {
  std::vector<int32_t> out;
  sampling::Sampler greedy({.temp = 0, .banned = std::move(banned)});
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
// differing step, the CPU's margin there between its token and the GPU's, and how far the backends' logits differ.
// The GPU's choice is always within twice the largest difference of the CPU's (each of the two logits moved by at
// most that), so the margin alone proves nothing. What tells the backends' rounding at a near-tie from a wrong
// product is where the difference sits: rounding moves every logit alike, so neither of the two tokens' logits moved
// further than the largest move among all the others; a product that is wrong for these tokens moves theirs most.
struct Parting {
  size_t step = 0;
  float cpu_margin = 0;  // cpu[cpu's token] - cpu[gpu's token]
  float max_diff = 0;    // max over the vocabulary of |gpu - cpu| at that step
  float pair_diff = 0;   // max of |gpu - cpu| over the two tokens
  float others_diff = 0; // max of |gpu - cpu| over every other token
  bool near_tie() const { return pair_diff <= others_diff; }
};

inline std::optional<Parting> parting(engine::Model& cpu_model, engine::Session& gpu, const std::vector<int32_t>& prompt,
                                      const std::vector<int32_t>& gpu_ids, std::span<const int32_t> banned = {}) {
  auto cpu = session_of(cpu_model);
  if (!cpu) return std::nullopt;
  const int64_t V = cpu_model.spec().n_vocab;
  gpu.truncate(0);
  if (!cpu->eval(prompt).ok() || !gpu.eval(prompt).ok()) return std::nullopt;
  for (size_t i = 0; i < gpu_ids.size(); ++i) {
    auto cl = cpu->logits(), gl = gpu.logits();
    std::vector<float> c(cl.end() - V, cl.end()), g(gl.end() - V, gl.end());
    for (int32_t id : banned) c[id] = g[id] = -INFINITY;
    const int32_t mine = int32_t(std::max_element(c.begin(), c.end()) - c.begin());
    if (mine != gpu_ids[i]) {
      Parting p{.step = i, .cpu_margin = c[mine] - c[gpu_ids[i]]};
      for (int64_t v = 0; v < V; ++v) {
        if (!std::isfinite(c[v])) continue;
        float& into = v == mine || v == gpu_ids[i] ? p.pair_diff : p.others_diff;
        into = std::max(into, std::fabs(g[v] - c[v]));
      }
      p.max_diff = std::max(p.pair_diff, p.others_diff);
      return p;
    }
    if (!cpu->eval(std::span(&mine, 1)).ok() || !gpu.eval(std::span(&mine, 1)).ok()) return std::nullopt;
  }
  return std::nullopt;
}

// For a robust gold case whose GPU text differs: passes only where the GPU parts from the CPU engine at a near-tie,
// and says where and by how much.
inline void expect_near_tie(engine::Model& cpu_model, engine::Session& gpu, const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& gpu_ids, const std::string& what,
                            std::span<const int32_t> banned = {}) {
  const auto p = parting(cpu_model, gpu, prompt, gpu_ids, banned);
  ASSERT_TRUE(p.has_value()) << what << ": the text differs from the gold completion, the tokens from the CPU's not";
  std::printf("[near-tie] %s: parts from the CPU engine at step %zu, CPU margin %.4g; the backends' logits differ "
              "by up to %.4g on the two tokens, %.4g on the others\n",
              what.c_str(), p->step, p->cpu_margin, p->pair_diff, p->others_diff);
  EXPECT_TRUE(p->near_tie()) << what << ": parts from the CPU engine at step " << p->step << " (margin "
                             << p->cpu_margin << ") where the two tokens' logits moved by " << p->pair_diff
                             << ", more than any other's (" << p->others_diff << ")";
}

// Greedy generation of every gold case on the GPU model, each printed under `tag` with its common prefix with
// llama.cpp's completion; where `check`, a robust case must equal it byte for byte or part from the CPU engine at a
// measured near-tie. Returns the experts the CPU computed for the GPU's sessions.
inline uint64_t expect_gold_cases(engine::Model& gpu, engine::Model& cpu, const std::vector<GoldCase>& cases,
                                  const std::string& tag, bool check = true) {
  PieceDecoder pieces(gpu.file());
  uint64_t cpu_experts = 0;
  for (const auto& c : cases) {
    auto s = session_of(gpu);
    if (!s) return cpu_experts;
    const auto ids = greedy_gpu(*s, c.prompt_ids, c.n_predict);
    cpu_experts += s->stats().cpu_experts;
    std::string text;
    for (int32_t id : ids) text += pieces.piece(id);
    std::printf("[%s] robust=%d common prefix %zu/%zu bytes  prompt \"%s\"\n", tag.c_str(), c.robust,
                common_prefix(text, c.completion), c.completion.size(), c.prompt.substr(0, 40).c_str());
    if (check && c.robust && text != c.completion) expect_near_tie(cpu, *s, c.prompt_ids, ids, tag + " prompt: " + c.prompt);
  }
  return cpu_experts;
}

// The model on the GPU under the smallest budget it accepts: `need` bytes (what its refusal of a small budget
// names), or the first MiB above it that a second measurement of the CUDA context accepts; nullptr (a failure) if
// none up to 8 MiB above does. The budget it took into *accepted.
inline std::unique_ptr<engine::Model> open_at_smallest_budget(const std::string& path, uint32_t n_ctx, uint64_t need,
                                                              uint64_t* accepted = nullptr, engine::GpuOptions gpu = {}) {
  std::string last;
  for (uint64_t budget = need; budget <= need + (8ull << 20); budget += 1ull << 20) {
    gpu.budget = budget;
    auto r = engine::Model::open(path, {.n_ctx = n_ctx, .backend = engine::Backend::kCuda, .gpu = gpu});
    if (!r.ok()) {
      last = r.error().message;
      continue;
    }
    if (accepted) *accepted = budget;
    return std::move(r).value();
  }
  ADD_FAILURE() << path << ": no budget up to 8 MiB above " << need << " accepted; the last refusal: " << last;
  return nullptr;
}

}  // namespace df::test
