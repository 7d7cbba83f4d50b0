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

std::filesystem::path temp_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string id = info ? std::string(info->test_suite_name()) + "." + info->name() : "global";
  auto dir = std::filesystem::temp_directory_path() / ("diskformer-test-" + std::to_string(::getpid())) / id / name;
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
