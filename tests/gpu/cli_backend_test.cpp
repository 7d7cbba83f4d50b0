// run and chat on the GPU through the CLI: `run --backend cuda` prints llama.cpp's greedy completion for every robust
// gold case of every shared model (the others report their common prefix), a GPU is the default where present, and
// a two-turn greedy chat on the GPU replies as the CPU does.
#include <algorithm>
#include <fstream>

#include "gpu/gpu_support.h"
#include "model/gold.h"
#include "support/cli_run.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

const char* const kModels[] = {"qwen3moe-q4_0", "qwen3moe-q8_0", "qwen3-q4_0", "llama-f16", "mixtral-q4_0"};

class RunCuda : public ::testing::TestWithParam<const char*> {};

TEST_P(RunCuda, GreedyOutputIsLlamaCpps) {
  DF_REQUIRE_GPU();
  const std::string name = GetParam();
  DF_REQUIRE_SHARED(model, "models/" + name + ".gguf");
  const auto cases = read_gold((shared_dir() / "models" / (name + ".gold.json")).string());
  const auto prompt_file = temp_dir("prompt") / "prompt.txt";
  for (size_t i = 0; i < cases.size(); ++i) {
    const GoldCase& c = cases[i];
    std::ofstream(prompt_file, std::ios::binary) << c.prompt;
    const std::string args = "run -m " + model.string() + " -f " + prompt_file.string() + " -n " +
                             std::to_string(c.n_predict) + " --temp 0 --ignore-eos";
    const CliRun r = run_cli_capture(args + " --backend cuda");
    ASSERT_EQ(r.status, 0) << r.err;
    const size_t common = common_prefix(r.out, c.completion);
    std::printf("[gpu-run] %-14s case %zu robust=%d common prefix %zu/%zu bytes\n", name.c_str(), i, c.robust, common,
                c.completion.size());
    if (c.robust) {
      EXPECT_EQ(r.out, c.completion) << name << " case " << i;
    }
    if (i == 0) {
      EXPECT_NE(r.err.find("backend cuda ("), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("in use on the device (driver-reported peak)"), std::string::npos) << r.err;
      // With a GPU present, cuda is the default.
      const CliRun d = run_cli_capture(args);
      EXPECT_EQ(d.status, 0) << d.err;
      EXPECT_EQ(d.out, r.out);
      EXPECT_NE(d.err.find("backend cuda ("), std::string::npos) << d.err;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RunCuda, ::testing::ValuesIn(kModels), model_param_name);

// qwen35moe runs on the GPU where one is present, as the default and with --backend cuda alike (its gold cases:
// forward_test.cpp and stream_test.cpp, with the near-tie rule).
TEST(RunCuda, Qwen35MoeRunsOnTheGpuByDefault) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(model, "models/qwen35moe-q8_0.gguf");
  const auto cases = read_gold((shared_dir() / "models/qwen35moe-q8_0.gold.json").string());
  const GoldCase& c = cases.at(0);
  const std::string args = "run -m " + model.string() + " -p '" + c.prompt + "' -n 32 --temp 0 --ignore-eos";
  const CliRun d = run_cli_capture(args);
  EXPECT_EQ(d.status, 0) << d.err;
  EXPECT_NE(d.err.find("backend cuda ("), std::string::npos) << d.err;
  EXPECT_EQ(d.err.find("does not run"), std::string::npos) << d.err;
  const CliRun r = run_cli_capture(args + " --backend cuda");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, d.out);
}

// --gpu-budget on run: the smallest budget the CLI accepts (found by bisection, since the device memory in use counts
// the CUDA context, which only the device knows) streams the experts through a small GPU cache and prints what the
// all-resident run prints. The shared models' experts are smaller than what streaming itself loads (kernels,
// buffers), so the test writes a synthetic model with 4 layers of the 2g preset (~250 MB of experts). The prompt is
// one token, so every step runs the fused decode kernels on both sides and the logits agree bit for bit (a longer
// prompt may split its experts into groups, whose products sum in another order: a random model's near-ties flip).
TEST(RunCudaBudget, SmallestAcceptedBudgetStreamsExpertsWithTheResidentOutput) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(tok, "models/qwen3moe-q4_0.gguf");
  const auto model = temp_dir("budget_model") / "m.gguf";
  const CliRun made = run_cli_capture("synth --arch qwen3moe --preset 2g --layers 4 --type q4_0 --tokenizer-from " +
                                      tok.string() + " -o " + model.string() + " --quiet");
  ASSERT_EQ(made.status, 0) << made.err;
  // Without the CPU's share of decode, which adds its experts' rows in another order.
  const std::string args = "run --backend cuda -m " + model.string() +
                           " -p 'The' -n 24 --temp 0 --ignore-eos -c 256 --cpu-experts off";
  const CliRun resident = run_cli_capture(args);
  ASSERT_EQ(resident.status, 0) << resident.err;
  uint64_t lo = 1ull << 20, hi = cuda::query_devices().total_bytes;  // lo refused, hi accepted
  ASSERT_EQ(run_cli_capture(args + " --gpu-budget " + std::to_string(lo)).status, 1);
  CliRun at_hi = run_cli_capture(args + " --gpu-budget " + std::to_string(hi));
  ASSERT_EQ(at_hi.status, 0) << at_hi.err;
  while (hi - lo > (1ull << 20)) {
    const uint64_t mid = lo + (hi - lo) / 2;
    CliRun r = run_cli_capture(args + " --gpu-budget " + std::to_string(mid));
    if (r.status == 0) {
      hi = mid, at_hi = std::move(r);
    } else {
      EXPECT_NE(r.err.find("budget"), std::string::npos) << r.err;  // refused with the numbers
      EXPECT_EQ(r.out, "");
      lo = mid;
    }
  }
  const bool streamed = at_hi.err.find("experts streamed through") != std::string::npos;
  std::printf("[gpu-run-budget] smallest accepted --gpu-budget %.1f MiB, experts streamed %d\n", hi / 1048576.0,
              streamed);
  EXPECT_EQ(at_hi.out, resident.out);
  EXPECT_TRUE(streamed) << at_hi.err;
  if (streamed) {
    EXPECT_NE(at_hi.err.find("GPU expert cache hit rate"), std::string::npos) << at_hi.err;
  }
  // With the CPU's share (the default) the run streams too and prints text.
  std::string shared_args = args.substr(0, args.size() - std::string(" --cpu-experts off").size());
  const CliRun shared = run_cli_capture(shared_args + " --gpu-budget " + std::to_string(hi));
  EXPECT_EQ(shared.status, 0) << shared.err;
  EXPECT_FALSE(shared.out.empty());
}

// The second turn reuses the KV cache of the first (truncate to the shared prefix, evaluate the rest) on both
// backends; greedy replies must agree token for token.
TEST(ChatCuda, TwoTurnsReplyAsOnTheCpu) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q4_0.gguf");
  const std::string args = "chat -m " + model.string() + " -n 8 --temp 0 --ignore-eos --system 'Be brief.'";
  const std::string input = "Hello\nAnd then?\n";
  const CliRun cpu = run_cli_capture(args + " --backend cpu", input);
  const CliRun gpu = run_cli_capture(args + " --backend cuda", input);
  ASSERT_EQ(cpu.status, 0) << cpu.err;
  ASSERT_EQ(gpu.status, 0) << gpu.err;
  std::printf("[gpu-chat] cpu: %s[gpu-chat] gpu: %s", cpu.out.c_str(), gpu.out.c_str());
  EXPECT_GE(std::count(gpu.out.begin(), gpu.out.end(), '\n'), 2);  // one line end per reply at least
  EXPECT_EQ(gpu.out, cpu.out);
}

}  // namespace
}  // namespace df::test
