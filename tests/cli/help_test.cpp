// What the help says: the top-level help lists --version (and it works); each command's usage line names the
// command once.
#include <gtest/gtest.h>

#include <string>

#include "support/cli_run.h"

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

}  // namespace
}  // namespace df::test
