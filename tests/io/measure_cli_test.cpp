// `diskformer measure` end to end on a small file: the JSON's shape, what it says about O_DIRECT and backends, and
// its exit codes. Speeds are not checked (benchmarks report them; tests do not assert them).
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include <gtest/gtest.h>

#include "diskformer/io/reader.h"
#include "io/io_support.h"
#include "support/test_paths.h"

namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;
};

CliRun run_cli(const std::string& args) {
  std::string cmd = df::test::cli_path().string() + " measure " + args + " 2>/dev/null";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(MeasureCli, JsonDescribesEveryRun) {
  auto dir = df::test::temp_dir("measure");
  const bool direct_fs = df::io::test::direct_supported(dir);
  auto path = dir / "probe.bin";
  {
    std::ofstream out(path, std::ios::binary);
    std::string block(1 << 20, '\x5a');
    for (int i = 0; i < 24; i++) out.write(block.data(), std::streamsize(block.size()));
  }
  CliRun r = run_cli("--path " + path.string() + " --seconds 0.05 --repeats 1 --qd 4 --record-bytes 1M --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["file_bytes"].get<uint64_t>(), 24u << 20);
  EXPECT_EQ(j["record_bytes"].get<uint64_t>(), 1u << 20);
  EXPECT_TRUE(j["pinned_h2d_GBps"].is_null());
  bool uring = j["io_uring_available"].get<bool>();
  EXPECT_EQ(uring, df::io::test::uring_unavailable_reason().empty());
  // Per backend: sequential direct and buffered, random direct and buffered at qd 4, random unaligned, slot pool.
  size_t backends = uring ? 2 : 1;
  ASSERT_EQ(j["runs"].size(), 6 * backends);
  int direct_runs = 0, buffered_runs = 0;
  for (const auto& run : j["runs"]) {
    EXPECT_GT(run["MBps"]["median"].get<double>(), 0.0) << run.dump();
    EXPECT_GT(run["reads_per_s"]["median"].get<double>(), 0.0) << run.dump();
    EXPECT_LE(run["latency_p50_us"].get<double>(), run["latency_max_us"].get<double>() * 1.0001) << run.dump();
    if (run["pattern"] != "sequential") {
      EXPECT_EQ(run["qd"].get<unsigned>(), 4u);
    }
    if (run["direct_requested"].get<bool>()) {
      direct_runs++;
      EXPECT_EQ(run["direct"].get<bool>(), direct_fs) << run.dump();
    } else {
      buffered_runs++;
      EXPECT_FALSE(run["direct"].get<bool>());
    }
  }
  EXPECT_EQ(direct_runs, int(4 * backends));
  EXPECT_EQ(buffered_runs, int(2 * backends));
  const auto& bar = j["bar"];
  EXPECT_DOUBLE_EQ(bar["target_ratio"].get<double>(), 0.9);
  if (!direct_fs) {
    EXPECT_TRUE(bar["ratio"].is_null());
    return;
  }
  ASSERT_TRUE(bar["ratio"].is_number());
  EXPECT_NEAR(bar["ratio"].get<double>(), bar["random_MBps"].get<double>() / bar["sequential_MBps"].get<double>(), 1e-9);
  EXPECT_EQ(bar["pass"].get<bool>(), bar["ratio"].get<double>() >= 0.9);
}

TEST(MeasureCli, ExitCodes) {
  EXPECT_EQ(run_cli("").exit_code, 2);
  EXPECT_EQ(run_cli("--path /nonexistent/probe.bin").exit_code, 1);
  auto small = df::test::temp_dir("measure-small") / "tiny.bin";
  std::ofstream(small, std::ios::binary) << std::string(10000, 'x');
  EXPECT_EQ(run_cli("--path " + small.string() + " --json").exit_code, 1);  // smaller than one record
  EXPECT_EQ(run_cli("--path " + small.string() + " --backend nvme").exit_code, 2);
}

}  // namespace
