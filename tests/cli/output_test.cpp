// Output lost to a full device or a closed stdout is a runtime failure (exit 1) with one line saying so, in every
// command: main checks stdout once after the command (src/cli/output.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/small_gguf.h"
#include "support/cli_run.h"

namespace df::test {
namespace {

namespace fs = std::filesystem;

void expect_write_failure(const std::string& args, const char* command) {
  const CliRun r = run_cli_capture(args);
  EXPECT_EQ(r.status, 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(std::string("diskformer ") + command + ": error writing to standard output"), std::string::npos)
      << args << "\n" << r.err;
}

TEST(Cli, FullDeviceFailsEveryProduct) {
  const fs::path dir = temp_dir("output");
  const std::string gguf = (dir / "small.gguf").string();
  write_small_gguf(gguf);
  std::ofstream(dir / "t.jinja") << "{% for m in messages %}{{ m.content }}{% endfor %}";
  std::ofstream(dir / "m.json") << R"([{"role": "user", "content": "hello"}])";

  expect_write_failure("--version >/dev/full", "--version");
  expect_write_failure("--help >/dev/full", "help");
  expect_write_failure("inspect --help >/dev/full", "inspect");
  expect_write_failure("inspect -m " + gguf + " >/dev/full", "inspect");
  expect_write_failure("inspect -m " + gguf + " --json >/dev/full", "inspect");
  expect_write_failure("render-template --template " + (dir / "t.jinja").string() + " --messages " +
                           (dir / "m.json").string() + " >/dev/full",
                       "render-template");
  // A closed descriptor fails the same way.
  expect_write_failure("inspect -m " + gguf + " >&-", "inspect");
  // The same command with somewhere to write succeeds.
  EXPECT_EQ(run_cli_capture("inspect -m " + gguf + " >/dev/null").status, 0);
}

TEST(Cli, FullDeviceFailsTokenizeAndRun) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  expect_write_failure("tokenize -m " + model.string() + " -p hello >/dev/full", "tokenize");
  expect_write_failure("run -m " + model.string() + " -p hello -n 4 --temp 0 --quiet >/dev/full", "run");
  const CliRun r = run_cli_capture("run -m " + model.string() + " -p hello -n 4 --temp 0 --quiet >/dev/full");
  EXPECT_EQ(r.err.find("decode"), std::string::npos) << "no stats line after the text was lost\n" << r.err;
}

}  // namespace
}  // namespace df::test
