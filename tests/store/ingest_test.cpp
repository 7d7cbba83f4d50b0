// `diskformer ingest` as a process: killed at random points and resumed, it ends byte-identical to a clean ingest;
// it refuses to resume into another source or layout; a full disk or a permission error ends with a message and no
// complete store.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mount.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "diskformer/gguf/reader.h"
#include "diskformer/store/store.h"
#include "store/store_test_util.h"

namespace df::store {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

void expect_same_file(const fs::path& a, const fs::path& b) {
  ASSERT_TRUE(fs::exists(a)) << a;
  ASSERT_TRUE(fs::exists(b)) << b;
  std::string x = test::slurp(a), y = test::slurp(b);
  ASSERT_EQ(x.size(), y.size()) << a << " vs " << b;
  EXPECT_TRUE(x == y) << a << " and " << b << " differ";
}

void expect_same_store(const fs::path& a, const fs::path& b, bool same_source = true) {
  expect_same_file(a / kDataFile, b / kDataFile);
  expect_same_file(a / kHeaderFile, b / kHeaderFile);
  if (same_source) {
    expect_same_file(a / kManifestFile, b / kManifestFile);
  } else {
    auto x = nlohmann::json::parse(test::slurp(a / kManifestFile)), y = nlohmann::json::parse(test::slurp(b / kManifestFile));
    EXPECT_EQ(x["records"], y["records"]);
  }
  EXPECT_FALSE(fs::exists(a / kProgressFile));
}

// Starts a slowed-down ingest and kills it with SIGKILL after `ms`; returns the exit code (137 when killed). With
// `after_checkpoint` the time counts from the run's first checkpoint, or, where an earlier run left one, from the
// run's word on it (resuming or starting over): a point of the run itself, not of the clock, since starting the CLI
// alone can take most of the delay on a slow machine.
int ingest_killed_after(const fs::path& model, const fs::path& dir, int ms, const fs::path& scratch,
                        std::string* err = nullptr, bool after_checkpoint = false) {
  std::string out = (scratch / "k.out").string(), errp = (scratch / "k.err").string();
  const bool had_checkpoint = fs::exists(dir / kProgressFile);
  pid_t pid = test::spawn_cli({"ingest", "-m", model.string(), "--store", dir.string(), "--limit-rate", "3M",
                               "--checkpoint-every", "64K"},
                              out, errp);
  auto reached = [&] {
    if (!had_checkpoint) return fs::exists(dir / kProgressFile);
    const std::string said = test::slurp(errp);
    return said.find("resuming at") != std::string::npos || said.find("starting over") != std::string::npos;
  };
  for (int i = 0; after_checkpoint && i < 500 && !reached(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  ::kill(pid, SIGKILL);
  int code = test::wait_child(pid);
  if (err) *err = test::slurp(errp);
  return code;
}

TEST(Ingest, KilledAtRandomPointsEndsByteIdenticalToACleanIngest) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q8_0.gguf");
  fs::path tmp = test::temp_dir("kill");
  auto clean = run_cli({"ingest", "-m", model.string(), "--store", (tmp / "clean").string(), "--quiet"}, tmp);
  ASSERT_EQ(clean.code, 0) << clean.err;
  EXPECT_TRUE(clean.err.empty()) << clean.err;

  unsigned seed = static_cast<unsigned>(std::random_device{}());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> delay(0, 400);
  fs::path dir = tmp / "killed";
  int kills = 0, resumes = 0;
  for (int i = 0; i < 20; ++i) {
    std::string err;
    // Even rounds count from the start (kills during setup too), odd ones from the first checkpoint on disk.
    int code = ingest_killed_after(model, dir, delay(rng), tmp, &err, i % 2 == 1);
    if (err.find("resuming at") != std::string::npos) ++resumes;
    if (code == 0) break;  // finished before the kill
    ASSERT_EQ(code, 128 + SIGKILL) << err;
    ++kills;
  }
  auto last = run_cli({"ingest", "-m", model.string(), "--store", dir.string(), "--json"}, tmp);
  ASSERT_EQ(last.code, 0) << last.err;
  EXPECT_GE(kills, 5);
  EXPECT_GE(resumes, 2) << "the killed runs should have continued from checkpoints";
  auto j = nlohmann::json::parse(last.out);
  EXPECT_EQ(j["data_bytes"], fs::file_size(dir / kDataFile));
  expect_same_store(dir, tmp / "clean");
  EXPECT_TRUE(Store::open(dir.string(), {.source = model.string()}).ok());

  // Run again: nothing to do. A checkpoint left by a kill between the manifest and its removal is cleared.
  std::ofstream(dir / kProgressFile) << "{}";
  auto again = run_cli({"ingest", "-m", model.string(), "--store", dir.string()}, tmp);
  EXPECT_EQ(again.code, 0);
  EXPECT_NE(again.err.find("up to date"), std::string::npos) << again.err;
  EXPECT_FALSE(fs::exists(dir / kProgressFile));
  expect_same_store(dir, tmp / "clean");
}

TEST(Ingest, RefusesToResumeIntoAnotherSourceOrLayout) {
  DF_REQUIRE_SHARED(a, "models/qwen3-q4_0.gguf");
  DF_REQUIRE_SHARED(b, "models/mixtral-q4_0.gguf");
  fs::path tmp = test::temp_dir("other");
  fs::path dir = tmp / "store";
  ASSERT_EQ(ingest_killed_after(a, dir, 100, tmp, nullptr, true), 128 + SIGKILL);
  ASSERT_TRUE(fs::exists(dir / kProgressFile));

  auto other = run_cli({"ingest", "-m", b.string(), "--store", dir.string()}, tmp);
  EXPECT_EQ(other.code, 1);
  EXPECT_NE(other.err.find("interrupted ingest of " + a.string()), std::string::npos) << other.err;
  EXPECT_NE(other.err.find("--force"), std::string::npos) << other.err;

  std::string saved = test::slurp(dir / kProgressFile);
  auto j = nlohmann::json::parse(saved);
  j["layout_version"] = 7;
  std::ofstream(dir / kProgressFile) << j.dump();
  auto layout = run_cli({"ingest", "-m", a.string(), "--store", dir.string()}, tmp);
  EXPECT_EQ(layout.code, 1);
  EXPECT_NE(layout.err.find("layout version 7"), std::string::npos) << layout.err;
  EXPECT_FALSE(fs::exists(dir / kManifestFile));

  auto forced = run_cli({"ingest", "-m", b.string(), "--store", dir.string(), "--force", "--quiet"}, tmp);
  ASSERT_EQ(forced.code, 0) << forced.err;
  auto s = Store::open(dir.string(), {.source = b.string()});
  ASSERT_TRUE(s.ok()) << s.error().message;

  // A complete store of b is not overwritten by a without --force.
  auto over = run_cli({"ingest", "-m", a.string(), "--store", dir.string()}, tmp);
  EXPECT_EQ(over.code, 1);
  EXPECT_NE(over.err.find("holds a store of " + b.string()), std::string::npos) << over.err;
}

TEST(Ingest, SourceChangedBetweenRunsStartsOver) {
  DF_REQUIRE_SHARED(a, "models/qwen3-q4_0.gguf");
  DF_REQUIRE_SHARED(b, "models/mixtral-q4_0.gguf");
  fs::path tmp = test::temp_dir("changed");
  fs::path m = tmp / "m.gguf";
  test::copy_writable(a, m);
  fs::path dir = tmp / "store";
  ASSERT_EQ(ingest_killed_after(m, dir, 100, tmp, nullptr, true), 128 + SIGKILL);
  ASSERT_TRUE(fs::exists(dir / kProgressFile));
  test::copy_writable(b, m);
  auto r = run_cli({"ingest", "-m", m.string(), "--store", dir.string()}, tmp);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("changed since the interrupted ingest (size"), std::string::npos) << r.err;
  auto clean = run_cli({"ingest", "-m", b.string(), "--store", (tmp / "clean").string(), "--quiet"}, tmp);
  ASSERT_EQ(clean.code, 0) << clean.err;
  expect_same_store(dir, tmp / "clean", false);

  // A complete store whose source changed is rebuilt, not used.
  test::copy_writable(a, m);
  auto rebuilt = run_cli({"ingest", "-m", m.string(), "--store", dir.string()}, tmp);
  ASSERT_EQ(rebuilt.code, 0) << rebuilt.err;
  EXPECT_NE(rebuilt.err.find("changed since the store was made"), std::string::npos) << rebuilt.err;
  EXPECT_TRUE(Store::open(dir.string(), {.source = m.string()}).ok());
}

TEST(Ingest, OneWriterPerStore) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  fs::path tmp = test::temp_dir("lock");
  fs::path dir = tmp / "store";
  pid_t pid = test::spawn_cli({"ingest", "-m", model.string(), "--store", dir.string(), "--limit-rate", "3M"},
                              (tmp / "a.out").string(), (tmp / "a.err").string());
  for (int i = 0; i < 500 && !fs::exists(dir / kProgressFile); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto second = run_cli({"ingest", "-m", model.string(), "--store", dir.string()}, tmp);
  EXPECT_EQ(second.code, 1);
  EXPECT_NE(second.err.find("another ingest is writing"), std::string::npos) << second.err;
  EXPECT_EQ(test::wait_child(pid), 0) << test::slurp(tmp / "a.err");
  EXPECT_TRUE(Store::open(dir.string(), {.source = model.string()}).ok());
}

TEST(Ingest, DamagedCheckpointStartsOver) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  fs::path tmp = test::temp_dir("damaged");
  fs::path dir = tmp / "store";
  auto clean = run_cli({"ingest", "-m", model.string(), "--store", (tmp / "clean").string(), "--quiet"}, tmp);
  ASSERT_EQ(clean.code, 0) << clean.err;
  for (const char* damage : {"done", "json", "data"}) {
    SCOPED_TRACE(damage);
    ASSERT_EQ(ingest_killed_after(model, dir, 100, tmp, nullptr, true), 128 + SIGKILL);
    ASSERT_TRUE(fs::exists(dir / kProgressFile));
    std::string expect;
    if (std::string(damage) == "done") {
      auto j = nlohmann::json::parse(test::slurp(dir / kProgressFile));
      j["done"] = "half";
      std::ofstream(dir / kProgressFile) << j.dump();
      expect = "does not match its checkpoint";
    } else if (std::string(damage) == "json") {
      std::ofstream(dir / kProgressFile) << "{\"format\": ";
      expect = "not valid JSON";
    } else {
      fs::resize_file(dir / kDataFile, 4096);
      expect = "does not match its checkpoint";
    }
    auto r = run_cli({"ingest", "-m", model.string(), "--store", dir.string()}, tmp);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("starting over"), std::string::npos) << r.err;
    expect_same_store(dir, tmp / "clean");
    fs::remove(dir / kManifestFile);  // the next round starts from an unfinished store again
  }
}

TEST(Ingest, FullDiskEndsWithAMessageAndNoCompleteStore) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q8_0.gguf");
  fs::path tmp = test::temp_dir("full");
  // A file size limit: the kernel answers EFBIG where a full disk answers ENOSPC, through the same paths.
  auto r = run_cli({"ingest", "-m", model.string(), "--store", (tmp / "store").string()}, tmp,
                   {.max_file_bytes = 2 << 20});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("data.bin"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "store" / kManifestFile));
  EXPECT_FALSE(Store::open((tmp / "store").string()).ok());

  // A real full filesystem where this process may mount one (root with CAP_SYS_ADMIN).
  fs::path mnt = tmp / "tmpfs";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=3m") != 0) {
    std::printf("[   NOTE   ] no tmpfs mount here (%s): ENOSPC checked through RLIMIT_FSIZE only\n",
                std::strerror(errno));
    return;
  }
  auto full = run_cli({"ingest", "-m", model.string(), "--store", (mnt / "store").string()}, tmp);
  bool complete = fs::exists(mnt / "store" / kManifestFile);
  ::umount2(mnt.c_str(), MNT_DETACH);
  EXPECT_EQ(full.code, 1) << full.err;
  EXPECT_NE(full.err.find("No space left on device"), std::string::npos) << full.err;
  EXPECT_FALSE(complete);
}

TEST(Ingest, PermissionErrorEndsWithAMessage) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  fs::path tmp = test::temp_dir("perm");
  fs::path ro = tmp / "ro";
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                          fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  // Root ignores permission bits: play the unprivileged "nobody" for this run.
  test::SpawnOptions o;
  if (::geteuid() == 0) o.uid = 65534;
  auto r = run_cli({"ingest", "-m", model.string(), "--store", (ro / "store").string()}, tmp, o);
  fs::permissions(ro, fs::perms::owner_all);
  ASSERT_NE(r.code, 126) << "could not switch to an unprivileged user";
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find((ro / "store").string()), std::string::npos) << r.err;
}

TEST(Ingest, ProgressLinesWhenNotATerminalAndQuietSilences) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  fs::path tmp = test::temp_dir("progress");
  auto r = run_cli({"ingest", "-m", model.string(), "--store", (tmp / "a").string()}, tmp);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  EXPECT_NE(r.err.find("100%"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("MB/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ETA"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
  auto q = run_cli({"ingest", "-m", model.string(), "--store", (tmp / "b").string(), "--quiet"}, tmp);
  ASSERT_EQ(q.code, 0) << q.err;
  EXPECT_TRUE(q.err.empty()) << q.err;
  auto usage = run_cli({"ingest", "--store", (tmp / "c").string()}, tmp);
  EXPECT_EQ(usage.code, 2);
  auto missing = run_cli({"ingest", "-m", (tmp / "nope.gguf").string(), "--store", (tmp / "d").string()}, tmp);
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("nope.gguf"), std::string::npos) << missing.err;
}

TEST(Ingest, OverlappingTensorsAreRefusedNotAborted) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  fs::path tmp = test::temp_dir("overlap");
  auto f = gguf::read_file(model.string());
  ASSERT_TRUE(f.ok());
  // Point the third tensor's data at the second one's: its offset field ends its info record.
  const gguf::TensorInfo &a = f->tensors[1], &b = f->tensors[2];
  uint64_t field = b.info_offset + 8 + b.name.size() + 4 + 8 * b.shape.size() + 4;
  std::string bytes = test::slurp(model);
  uint64_t rel = a.offset - f->data_offset;
  std::memcpy(bytes.data() + field, &rel, sizeof rel);
  std::ofstream(tmp / "bad.gguf", std::ios::binary) << bytes;
  auto r = run_cli({"ingest", "-m", (tmp / "bad.gguf").string(), "--store", (tmp / "s").string()}, tmp);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("bad.gguf"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("offset"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "s" / kManifestFile));
}

TEST(Ingest, ProgressBarOnATerminal) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  fs::path tmp = test::temp_dir("tty");
  int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) GTEST_SKIP() << "no pseudo-terminal here";
  std::string slave = ::ptsname(master);
  pid_t pid = test::spawn_cli({"ingest", "-m", model.string(), "--store", (tmp / "s").string(), "--limit-rate", "8M"},
                              (tmp / "out").string(), slave);
  std::string seen;
  char buf[4096];
  for (;;) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      ssize_t n = ::read(master, buf, sizeof buf);
      if (n > 0) {
        seen.append(buf, static_cast<size_t>(n));
        continue;
      }
    }
    if (::waitpid(pid, nullptr, WNOHANG) == pid) break;
  }
  for (pollfd p{master, POLLIN, 0}; ::poll(&p, 1, 50) > 0;) {  // what it wrote just before it exited
    ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;
    seen.append(buf, static_cast<size_t>(n));
  }
  ::close(master);
  EXPECT_NE(seen.find("\r["), std::string::npos) << seen;  // redrawn in place
  EXPECT_NE(seen.find("100%"), std::string::npos) << seen;
  EXPECT_NE(seen.find("MB/s"), std::string::npos) << seen;
  EXPECT_NE(seen.find("ETA"), std::string::npos) << seen;
  EXPECT_TRUE(fs::exists(tmp / "s" / kManifestFile));
}

}  // namespace
}  // namespace df::store
