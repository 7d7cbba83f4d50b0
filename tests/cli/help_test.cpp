// What the help says: the top-level help lists --version (and it works); each command's usage line names the
// command once; each command lists the options it reads, with the defaults it takes; the CUDA options given to a CPU
// run warn that it ignores them.
#include <gtest/gtest.h>

#include <string>

#include "support/cli_run.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

TEST(Cli, TopLevelHelpListsVersion) {
  const CliRun help = run_cli_capture("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--version"), std::string::npos) << help.out;
  const CliRun version = run_cli_capture("--version");
  EXPECT_EQ(version.status, 0);
  EXPECT_EQ(version.out.rfind("diskformer ", 0), 0u) << version.out;
}

TEST(Cli, UsageLinesNameTheCommandOnce) {
  for (const char* command : {"inspect", "synth", "ingest", "measure", "tokenize", "render-template", "run", "convert",
                              "bench", "routing", "chat", "serve"}) {
    const CliRun r = run_cli_capture(std::string(command) + " --help");
    EXPECT_EQ(r.status, 0) << command;
    const std::string usage = r.out.substr(0, r.out.find('\n'));
    const std::string expected = std::string("usage: diskformer ") + command + " ";
    EXPECT_EQ(usage.rfind(expected, 0), 0u) << usage;
    EXPECT_EQ(usage.find(std::string(" ") + command + " ", expected.size() - 1), std::string::npos)
        << "named twice: " << usage;
  }
}

// The help line of an option ("  -c, --ctx-size N   context length ..."), or "" where the help has none.
std::string option_line(const std::string& help, const std::string& option) {
  for (size_t at = 0; at < help.size();) {
    const size_t end = help.find('\n', at);
    const std::string line = help.substr(at, end - at);
    if (line.find(" " + option + " ") != std::string::npos || line.find(" " + option + ",") != std::string::npos)
      return line;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "";
}

TEST(Cli, EachCommandListsTheOptionsItReadsWithItsDefaults) {
  const std::string routing = run_cli_capture("routing --help").out;
  for (const char* gpu_only : {"--backend", "--gpu-budget", "--cpu-experts", "--expert-prefetch", "-n", "--temp"})
    EXPECT_EQ(option_line(routing, gpu_only), "") << gpu_only << " in\n" << routing;
  EXPECT_NE(option_line(routing, "--ctx-size").find("(default: 512)"), std::string::npos) << routing;
  EXPECT_NE(option_line(routing, "--ram-budget"), "");

  const std::string run = run_cli_capture("run --help").out;
  EXPECT_NE(option_line(run, "--n-predict").find("(default 128;"), std::string::npos) << run;
  EXPECT_NE(option_line(run, "--ctx-size").find("the model's, at most 4096"), std::string::npos) << run;
  EXPECT_NE(option_line(run, "--json-stats"), "");
  EXPECT_NE(option_line(run, "--ram-budget").find("KV cache"), std::string::npos) << run;
  EXPECT_EQ(option_line(run, "--verbose"), "") << run;  // it changed nothing
  const std::string chat = run_cli_capture("chat --help").out;
  EXPECT_NE(option_line(chat, "--n-predict").find("(default -1;"), std::string::npos) << chat;

  const std::string bench = run_cli_capture("bench --help").out;
  EXPECT_NE(option_line(bench, "--ctx-size").find("the longest -p plus -n"), std::string::npos) << bench;
  EXPECT_EQ(option_line(bench, "--temp"), "") << bench;
#ifdef DISKFORMER_HAVE_CUDA
  EXPECT_NE(option_line(bench, "--backend").find("default: cuda where a GPU is present"), std::string::npos) << bench;
#else
  EXPECT_NE(option_line(bench, "--gpu-budget").find("this build has no CUDA backend: ignored"), std::string::npos)
      << bench;
#endif

  const std::string tokenize = run_cli_capture("tokenize --help").out;
  EXPECT_NE(option_line(tokenize, "--no-parse-special"), "") << tokenize;
  EXPECT_NE(option_line(tokenize, "--parse-special").find("the default"), std::string::npos) << tokenize;
  EXPECT_NE(option_line(run_cli_capture("inspect --help").out, "--ctx-size").find("with --gpu-budget"),
            std::string::npos);
}

TEST(Cli, CudaOptionsOnTheCpuBackendWarn) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q4_0.gguf");
  const std::string run = "run -m " + model.string() + " -p hi -n 2 -t 1 --quiet --backend cpu";
  const CliRun plain = run_cli_capture(run);
  EXPECT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.err.find("warning"), std::string::npos) << plain.err;
  const CliRun r = run_cli_capture(run + " --gpu-budget 1G --cpu-experts off");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("warning: --gpu-budget applies to the CUDA backend only: the CPU backend ignores it"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("warning: --cpu-experts applies to the CUDA backend only"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace df::test
