// bench --backend cuda through the CLI: all resident, and under --gpu-budget with the experts streamed (with and
// without the CPU's share of decode): the JSON carries the streaming fields, the device memory in use stays within
// the budget, a decode step is split into what the host did, and a budget too small is refused with the numbers.
#include <nlohmann/json.hpp>

#include "diskformer/cudart/devices.h"
#include "gpu/gpu_support.h"
#include "support/cli_run.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

nlohmann::json bench_json(const std::string& args) {
  const CliRun r = run_cli_capture("bench " + args + " -p 32 -n 8 -r 1 -c 128 --json --quiet");
  EXPECT_EQ(r.status, 0) << r.err;
  return r.status == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

TEST(BenchCuda, ResidentAndStreamedUnderABudget) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(tok, "models/qwen3moe-q4_0.gguf");
  // Experts large enough that streaming them saves more than it loads (kernels, buffers): 4 layers of the 2g preset.
  const auto model = temp_dir("bench_model") / "m.gguf";
  const CliRun made = run_cli_capture("synth --arch qwen3moe --preset 2g --layers 4 --type q4_0 --tokenizer-from " +
                                      tok.string() + " -o " + model.string() + " --quiet");
  ASSERT_EQ(made.status, 0) << made.err;
  const std::string m = "-m " + model.string();
  const nlohmann::json all = bench_json(m);  // cuda is the default where a GPU is present
  ASSERT_FALSE(all.is_null());
  EXPECT_EQ(all["backend"], "cuda");
  EXPECT_TRUE(all["gpu_budget"].is_null());
  EXPECT_TRUE(all["expert_hit_rate"].is_null());
  EXPECT_GT(all["decode_tok_s"]["median"].get<double>(), 0.0);

  // The smallest budget bench accepts (bisection: the device memory in use counts the CUDA context, which only the
  // device knows) streams the experts through a few slots.
  uint64_t lo = 1ull << 20, hi = all["gpu_mem_peak_bytes"].get<uint64_t>() + (256ull << 20);
  auto accepted = [&](uint64_t b) {
    return run_cli_capture("bench " + m + " --gpu-budget " + std::to_string(b) + " -p 8 -n 2 -r 1 -c 128 --json --quiet")
               .status == 0;
  };
  ASSERT_TRUE(accepted(hi));
  while (hi - lo > (1ull << 20)) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (accepted(mid) ? hi : lo) = mid;
  }
  const uint64_t budget = hi;
  for (const char* extra : {" --cpu-experts off", ""}) {
    const nlohmann::json s = bench_json(m + " --gpu-budget " + std::to_string(budget) + extra);
    ASSERT_FALSE(s.is_null()) << extra;
    std::printf("[gpu-bench-cli] budget %llu%s: %s\n", (unsigned long long)budget, extra, s.dump().c_str());
    EXPECT_EQ(s["gpu_budget"].get<uint64_t>(), budget);
    ASSERT_TRUE(s["gpu_slots"].is_number()) << "the smallest accepted budget did not stream the experts";
    EXPECT_GT(s["gpu_slots"].get<uint64_t>(), 0u);
    const double hit = s["expert_hit_rate"].get<double>();
    EXPECT_GE(hit, 0.0);
    EXPECT_LE(hit, 1.0);
    EXPECT_GT(s["bytes_from_ram"].get<uint64_t>(), 0u);
    EXPECT_GT(s["h2d_GBps"].get<double>(), 0.0);
    EXPECT_LE(s["gpu_mem_peak_bytes"].get<uint64_t>(), budget);
    // A decode step split by what the host did: the parts are times within the step, so none is negative and the
    // experts' three do not pass the step; without the CPU's share it takes no time.
    const nlohmann::json& t = s["decode_step_ms"];
    ASSERT_TRUE(t.is_object()) << extra;
    EXPECT_GT(t["total"].get<double>(), 0.0);
    for (const char* part : {"router_wait", "cpu_share", "expert_planning", "rest"}) {
      EXPECT_GE(t[part].get<double>(), 0.0) << part;
      EXPECT_LE(t[part].get<double>(), t["total"].get<double>()) << part;
    }
    EXPECT_GT(t["router_wait"].get<double>(), 0.0);
    if (!std::string(extra).empty()) {
      EXPECT_EQ(t["cpu_share"].get<double>(), 0.0);
    }
  }
  const CliRun tiny = run_cli_capture("bench " + m + " --gpu-budget 8M -p 8 -n 2 -r 1 --json");
  EXPECT_EQ(tiny.status, 1);
  EXPECT_EQ(tiny.out, "");
  EXPECT_NE(tiny.err.find("too small"), std::string::npos) << tiny.err;
}

}  // namespace
}  // namespace df::test
