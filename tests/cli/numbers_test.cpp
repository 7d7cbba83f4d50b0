// Out-of-range and non-finite numbers are usage errors (exit 2) that name the option, in every command that takes
// them; nothing wraps when narrowed. The model path need not exist: options are checked before anything is opened.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "support/cli_run.h"

namespace df::test {
namespace {

struct Refused {
  const char* args;
  const char* option;  // as the error names it
};

class NumberRefused : public ::testing::TestWithParam<Refused> {};

TEST_P(NumberRefused, IsAUsageErrorNamingTheOption) {
  const Refused& c = GetParam();
  const CliRun r = run_cli_capture(c.args);
  EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
  const std::string first = r.err.substr(0, r.err.find('\n'));
  EXPECT_NE(first.find(c.option), std::string::npos) << c.args << ": " << first;
  EXPECT_EQ(r.out, "");
}

constexpr const char* kRun = "run -m /nonexistent.gguf -p hi ";

INSTANTIATE_TEST_SUITE_P(
    Cli, NumberRefused,
    ::testing::Values(Refused{"run -m /nonexistent.gguf -p hi -n 4294967297", "--n-predict"},
                      Refused{"run -m /nonexistent.gguf -p hi -n -2", "--n-predict"},
                      Refused{"run -m /nonexistent.gguf -p hi --temp nan", "--temp"},
                      Refused{"run -m /nonexistent.gguf -p hi --temp -1", "--temp"},
                      Refused{"run -m /nonexistent.gguf -p hi --temp inf", "--temp"},
                      Refused{"run -m /nonexistent.gguf -p hi --temp 1e999", "--temp"},
                      Refused{"run -m /nonexistent.gguf -p hi --top-p 2", "--top-p"},
                      Refused{"run -m /nonexistent.gguf -p hi --top-p nan", "--top-p"},
                      Refused{"run -m /nonexistent.gguf -p hi --min-p -1", "--min-p"},
                      Refused{"run -m /nonexistent.gguf -p hi --top-k -5", "--top-k"},
                      Refused{"run -m /nonexistent.gguf -p hi --top-k 99999999999", "--top-k"},
                      Refused{"run -m /nonexistent.gguf -p hi --seed -5", "--seed"},
                      Refused{"run -m /nonexistent.gguf -p hi --seed 99999999999999999999", "--seed"},
                      Refused{"run -m /nonexistent.gguf -p hi --repeat-penalty 0", "--repeat-penalty"},
                      Refused{"run -m /nonexistent.gguf -p hi --repeat-penalty nan", "--repeat-penalty"},
                      Refused{"run -m /nonexistent.gguf -p hi -c -1", "--ctx-size"},
                      Refused{"run -m /nonexistent.gguf -p hi -t -3", "--threads"},
                      Refused{"chat -m /nonexistent.gguf --temp nan", "--temp"},
                      Refused{"chat -m /nonexistent.gguf -n 4294967297", "--n-predict"},
                      Refused{"chat -m /nonexistent.gguf --seed -5", "--seed"},
                      Refused{"bench -m /nonexistent.gguf -r 0", "--repetitions"},
                      Refused{"bench -m /nonexistent.gguf -b 4294967297", "--batch-size"},
                      Refused{"bench -m /nonexistent.gguf -p 99999999999999999999", "--n-prompt"},
                      Refused{"routing -m /nonexistent.gguf -p hi --max-tokens 4294967297", "--max-tokens"},
                      Refused{"inspect -m /nonexistent.gguf -c 4294967297", "--ctx-size"},
                      Refused{"measure --path /nonexistent --qd 0", "--qd"},
                      Refused{"measure --path /nonexistent --seconds nan", "--seconds"},
                      Refused{"measure --path /nonexistent --repeats 0", "--repeats"},
                      Refused{"synth --arch qwen3 --type q8_0 --tokenizer-from /nonexistent -o /nonexistent/x "
                              "--seed -5",
                              "--seed"},
                      Refused{"synth --arch qwen3 --type q8_0 --tokenizer-from /nonexistent -o /nonexistent/x "
                              "--layers 4294967297",
                              "--layers"}));

TEST(Cli, IntegersAreDecimal) {
  // "08" is eight (not an invalid octal number): past the options, the missing model is the failure.
  const CliRun r = run_cli_capture("run -m /nonexistent.gguf -p hi --top-k 08 --seed 010");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(run_cli_capture("run -m /nonexistent.gguf -p hi --top-k 0x10").status, 2);
}

TEST(Cli, ThreadsBeyondTheMachineWarnAndGoOn) {
  const unsigned hardware = std::thread::hardware_concurrency();
  if (hardware == 0 || hardware >= 1024) GTEST_SKIP() << "hardware threads unknown or at -t's limit";
  const CliRun r = run_cli_capture(std::string(kRun) + "-t " + std::to_string(hardware + 1));
  EXPECT_NE(r.err.find("warning: -t " + std::to_string(hardware + 1)), std::string::npos) << r.err;
  EXPECT_EQ(r.status, 1) << "past the warning, the missing model is the failure\n" << r.err;
}

}  // namespace
}  // namespace df::test
