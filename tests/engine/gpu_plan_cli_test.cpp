// inspect --gpu-budget end to end: the plan as a table and as JSON (the same numbers as plan_gpu), refusals exit 1
// with one line, usage errors exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "diskformer/backend/cuda/plan.h"
#include "diskformer/engine/model_files.h"
#include "diskformer/gguf/reader.h"
#include "support/cli_run.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

// `inspect ARGS`: exit status and stdout, with stderr after it when asked.
CliRun inspect(const std::string& args, bool with_stderr = false) {
  CliRun r = run_cli_capture("inspect " + args);
  if (with_stderr) r.out += r.err;
  return r;
}

cuda::GpuPlan library_plan(const std::filesystem::path& path, std::optional<uint64_t> budget, uint32_t n_ctx) {
  auto m = engine::open_model_files(path.string());
  EXPECT_TRUE(m.ok()) << m.error().message;
  auto p = cuda::plan_gpu((*m)->spec, (*m)->tensors, (*m)->layouts, {.budget = budget, .n_ctx = n_ctx});
  EXPECT_TRUE(p.ok()) << p.error().message;
  return *p;
}

// A budget for the resident part at -c 1024 and 40 of the 64 expert records.
uint64_t budget_for_40_slots(const std::filesystem::path& model) {
  const cuda::GpuPlan all = library_plan(model, std::nullopt, 1024);
  // Streaming keeps the token embeddings in host RAM where the head is not tied to them (output counted apart).
  const uint64_t host_embd = all.resident.output ? all.resident.token_embd : 0;
  // A streaming session adds buffers for its expert groups.
  auto m = engine::open_model_files(model.string());
  EXPECT_TRUE(m.ok());
  const uint64_t extra =
      cuda::session_buffers((*m)->spec, {.n_ctx = 1024, .streams_experts = true}).total() -
      cuda::session_buffers((*m)->spec, {.n_ctx = 1024}).total();
  return all.resident.total() - host_embd + extra + 40 * all.record_bytes + all.record_bytes / 2;
}

TEST(InspectGpuBudget, JsonIsTheLibrarysPlan) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q4_0.gguf");
  const uint64_t budget = budget_for_40_slots(model);
  const std::string b = " --gpu-budget " + std::to_string(budget);
  const CliRun r = inspect("-m " + model.string() + b + " -c 1024 --json");
  ASSERT_EQ(r.status, 0);
  const auto j = nlohmann::json::parse(r.out);
  const cuda::GpuPlan p = library_plan(model, budget, 1024);
  EXPECT_TRUE(p.stream_experts);
  EXPECT_EQ(p.slots, 40u);
  EXPECT_EQ(j["mode"], "experts streamed");
  EXPECT_EQ(j["budget"].get<uint64_t>(), budget);
  EXPECT_EQ(j["n_ctx"].get<uint32_t>(), 1024u);
  EXPECT_EQ(j["slots"].get<uint32_t>(), p.slots);
  EXPECT_EQ(j["record_bytes"].get<uint64_t>(), p.record_bytes);
  EXPECT_EQ(j["resident_bytes"]["total"].get<uint64_t>(), p.resident.total());
  EXPECT_EQ(j["resident_bytes"]["kv_cache"].get<uint64_t>(), p.resident.kv_cache);
  EXPECT_EQ(j["path"], model.string());
  // -c changes the KV cache, and with it the slots.
  const auto longer = nlohmann::json::parse(inspect("-m " + model.string() + b + " -c 1280 --json").out);
  EXPECT_EQ(longer["resident_bytes"]["kv_cache"].get<uint64_t>(), 1280 * p.resident.kv_cache / 1024);
  EXPECT_LT(longer["slots"].get<uint32_t>(), p.slots);
}

TEST(InspectGpuBudget, TableNamesItemsAndSlots) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q4_0.gguf");
  const uint64_t budget = budget_for_40_slots(model);
  const CliRun r = inspect("-m " + model.string() + " --gpu-budget " + std::to_string(budget) + " -c 1024");
  ASSERT_EQ(r.status, 0);
  const cuda::GpuPlan p = library_plan(model, budget, 1024);
  for (const std::string& part :
       {std::string("experts streamed"), std::string("KV cache"), std::to_string(p.resident.kv_cache),
        std::to_string(p.record_bytes), std::to_string(p.resident.total()), std::string("40  62.5% of 64 experts"),
        std::string("(at least 8)"), std::to_string(p.total_bytes())})
    EXPECT_NE(r.out.find(part), std::string::npos) << "missing '" << part << "' in:\n" << r.out;
}

TEST(InspectGpuBudget, RefusalsAndUsageErrors) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q4_0.gguf");
  DF_REQUIRE_SHARED(dense, "models/llama-f16.gguf");
  const CliRun small = inspect("-m " + model.string() + " --gpu-budget 100M", true);
  EXPECT_EQ(small.status, 1);
  EXPECT_NE(small.out.find("GPU budget 100.00 MiB (104857600 bytes) is too small"), std::string::npos) << small.out;
  EXPECT_EQ(std::count(small.out.begin(), small.out.end(), '\n'), 1) << small.out;
  const CliRun d = inspect("-m " + dense.string() + " --gpu-budget 520M", true);
  EXPECT_EQ(d.status, 1);
  EXPECT_NE(d.out.find("dense model"), std::string::npos) << d.out;
  EXPECT_EQ(inspect("-m " + dense.string() + " --gpu-budget 1G").status, 0);
  EXPECT_EQ(inspect("-m " + model.string() + " --gpu-budget 1X").status, 2);
  EXPECT_EQ(inspect("-m " + model.string() + " --gpu-budget 1G -c -5").status, 2);
}

}  // namespace
}  // namespace df::test
