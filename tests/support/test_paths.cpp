#include "support/test_paths.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace df::test {

std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("DISKFORMER_SHARED")) return env;
  return DF_SHARED_DIR;
}

// The environment overrides the build's paths where the test binaries run from another checkout (the GPU machine).
std::filesystem::path source_dir() {
  if (const char* env = std::getenv("DISKFORMER_SOURCE")) return env;
  return DF_SOURCE_DIR;
}

std::filesystem::path cli_path() {
  if (const char* env = std::getenv("DISKFORMER_CLI")) return env;
  return DF_CLI_PATH;
}

namespace {

std::filesystem::path process_temp_root() {
  return std::filesystem::temp_directory_path() / ("diskformer-test-" + std::to_string(::getpid()));
}

// A test binary's scratch files (models it wrote, stores, logs) go when its run passes and stay for inspection when
// one of its tests fails: otherwise every run of the suite leaves gigabytes behind in the temp directory.
class RemoveScratchWhenPassed : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!::testing::UnitTest::GetInstance()->Passed()) return;
    std::error_code ec;
    std::filesystem::remove_all(process_temp_root(), ec);
  }
};

const auto* const kScratchCleanup = ::testing::AddGlobalTestEnvironment(new RemoveScratchWhenPassed);

}  // namespace

std::filesystem::path temp_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string id = info ? std::string(info->test_suite_name()) + "." + info->name() : "global";
  auto dir = process_temp_root() / id / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace df::test
