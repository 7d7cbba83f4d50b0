// Ingest from an http URL served by a real nginx on loopback: the same store as from the file, through dropped
// connections and a server restart; a file changed between runs or during a read is noticed (ETag, 416); a 400 is
// reported.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "diskformer/store/ingest.h"
#include "diskformer/store/source.h"
#include "diskformer/store/store.h"
#include "store/http_server.h"
#include "store/store_test_util.h"

namespace df::store {
namespace {

namespace fs = std::filesystem;

class Http : public ::testing::Test {
 protected:
  void SetUp() override {
    auto bin = test::find_nginx();
    if (!bin) GTEST_SKIP() << "nginx is not installed (Debian package nginx-light): URL ingest not tested";
    if (!fs::exists(test::shared_dir() / "models")) GTEST_SKIP() << "missing shared models";
    tmp_ = test::temp_dir("http");
    nginx_ = std::make_unique<test::Nginx>(*bin, tmp_ / "nginx");
    std::string why = nginx_->start();
    ASSERT_EQ(why, "");
  }
  void TearDown() override {
    if (nginx_) nginx_->stop();
  }

  fs::path model(const char* name) { return test::shared_dir() / "models" / name; }
  // Puts a copy of a shared model at root/rel, with an mtime `age` seconds in the past (nginx's ETag is built
  // from the mtime in seconds and the size).
  // The copy is renamed into place, as a server's files are updated: a reader sees the old file or the new one.
  void serve(const char* name, const std::string& rel, int age = 0) {
    fs::path dst = nginx_->root() / rel, part = dst.string() + ".part";
    test::copy_writable(model(name), part);
    fs::last_write_time(part, fs::file_time_type::clock::now() - std::chrono::seconds(age));
    fs::rename(part, dst);
  }
  fs::path local_store(const char* name) {
    fs::path dir = tmp_ / (std::string("local-") + name);
    IngestOptions o;
    o.source = model(name).string();
    o.dir = dir.string();
    auto r = ingest(o);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return dir;
  }
  static void expect_same_records(const fs::path& a, const fs::path& b) {
    EXPECT_TRUE(test::slurp(a / kDataFile) == test::slurp(b / kDataFile)) << a << " vs " << b << ": data.bin differs";
    EXPECT_TRUE(test::slurp(a / kHeaderFile) == test::slurp(b / kHeaderFile)) << "header.gguf differs";
    auto x = nlohmann::json::parse(test::slurp(a / kManifestFile));
    auto y = nlohmann::json::parse(test::slurp(b / kManifestFile));
    EXPECT_EQ(x["records"], y["records"]);
  }

  // Until an ingest running on another thread has copied something (however slow the machine is today).
  static void wait_for_progress(const std::atomic<uint64_t>& done) {
    for (int i = 0; i < 1000 && done == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_GT(done, 0u) << "the ingest made no progress in 10 s";
  }

  fs::path tmp_;
  std::unique_ptr<test::Nginx> nginx_;
};

TEST_F(Http, UrlIngestEqualsFileIngest) {
  serve("qwen3moe-q8_0.gguf", "m.gguf", 100);
  fs::path dir = tmp_ / "url";
  std::string url = nginx_->url("m.gguf");
  auto r = test::run_cli({"ingest", "-m", url, "--store", dir.string(), "--quiet", "--json"}, tmp_);
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_records(dir, local_store("qwen3moe-q8_0.gguf"));
  auto m = nlohmann::json::parse(test::slurp(dir / kManifestFile));
  EXPECT_EQ(m["source"]["location"], url);
  EXPECT_FALSE(m["source"]["etag"].get<std::string>().empty());
  EXPECT_EQ(m["source"]["size"], fs::file_size(model("qwen3moe-q8_0.gguf")));
  EXPECT_TRUE(Store::open(dir.string(), {.source = url}).ok());

  // The file changes on the server: the store no longer matches it.
  serve("qwen3-q4_0.gguf", "m.gguf", 50);
  auto s = Store::open(dir.string(), {.source = url});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("ETag"), std::string::npos) << s.error().message;
}

TEST_F(Http, ConnectionsDroppedMidTransferResume) {
  serve("qwen3moe-q8_0.gguf", "m.gguf", 100);
  test::CuttingProxy proxy(nginx_->port(), 300 * 1024);
  IngestOptions o;
  o.source = "http://127.0.0.1:" + std::to_string(proxy.port()) + "/m.gguf";
  o.dir = (tmp_ / "cut").string();
  o.http.retry_delay_ms = 5;
  auto r = ingest(o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_GE(proxy.cuts(), 10);
  expect_same_records(tmp_ / "cut", local_store("qwen3moe-q8_0.gguf"));
}

TEST_F(Http, ServerKilledAndRestartedMidTransfer) {
  serve("qwen3-q4_0.gguf", "slow/m.gguf", 100);  // 3 MB at 2 MB/s
  IngestOptions o;
  o.source = nginx_->url("slow/m.gguf");
  o.dir = (tmp_ / "restart").string();
  o.checkpoint_every = 256 << 10;  // windows of 256 KiB: progress shows before the transfer ends
  o.http.retry_delay_ms = 50;
  Result<IngestResult> r = Error{"not run"};
  std::atomic<uint64_t> max_done{0};
  o.on_progress = [&](const IngestProgress& p) { max_done = std::max<uint64_t>(max_done, p.done); };
  std::thread t([&] { r = ingest(o); });
  wait_for_progress(max_done);
  nginx_->stop(SIGKILL);
  uint64_t done_at_kill = max_done;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(nginx_->start(), "");
  t.join();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->restarts, 0u);
  EXPECT_LT(done_at_kill, r->copied) << "the server was killed after the transfer had ended";
  expect_same_records(tmp_ / "restart", local_store("qwen3-q4_0.gguf"));
}

TEST_F(Http, FileChangedBetweenRunsStartsOver) {
  serve("qwen3-q4_0.gguf", "m.gguf", 100);
  fs::path dir = tmp_ / "changed";
  std::string url = nginx_->url("m.gguf");
  // Killed twice: the second run resumes from the first one's checkpoint.
  for (int run = 0; run < 2; ++run) {
    pid_t pid = test::spawn_cli({"ingest", "-m", url, "--store", dir.string(), "--limit-rate", "4M",
                                 "--checkpoint-every", "64K"},
                                (tmp_ / "k.out").string(), (tmp_ / "k.err").string());
    // The first run is killed after its first checkpoint, the second once it has said where it resumes (starting
    // the CLI can take longer than any fixed wait on a slow machine).
    for (int i = 0; i < 500 && !fs::exists(dir / kProgressFile); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (int i = 0; run == 1 && i < 500 && test::slurp(tmp_ / "k.err").find("resuming at") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::kill(pid, SIGKILL);
    std::string err = test::slurp(tmp_ / "k.err");
    ASSERT_EQ(test::wait_child(pid), 128 + SIGKILL) << err;
    ASSERT_TRUE(fs::exists(dir / kProgressFile));
    if (run == 1) {
      EXPECT_NE(test::slurp(tmp_ / "k.err").find("resuming at"), std::string::npos) << err;
    }
  }

  serve("mixtral-q4_0.gguf", "m.gguf", 10);
  auto r = test::run_cli({"ingest", "-m", url, "--store", dir.string()}, tmp_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("changed since the interrupted ingest"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ETag"), std::string::npos) << r.err;
  expect_same_records(dir, local_store("mixtral-q4_0.gguf"));
}

TEST_F(Http, FileChangedDuringAnIngestStartsOverInTheSameRun) {
  serve("qwen3moe-q8_0.gguf", "slow/m.gguf", 100);
  IngestOptions o;
  o.source = nginx_->url("slow/m.gguf");
  o.dir = (tmp_ / "during").string();
  o.checkpoint_every = 256 << 10;
  std::vector<std::string> notes;
  o.on_note = [&](const std::string& s) { notes.push_back(s); };
  Result<IngestResult> r = Error{"not run"};
  std::atomic<uint64_t> done{0};
  o.on_progress = [&](const IngestProgress& p) { done = p.done; };
  std::thread t([&] { r = ingest(o); });
  wait_for_progress(done);
  serve("qwen3-q4_0.gguf", "slow/m.gguf", 10);
  t.join();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->restarts, 1u);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("changed since it was opened"), std::string::npos) << notes[0];
  expect_same_records(tmp_ / "during", local_store("qwen3-q4_0.gguf"));
}

TEST_F(Http, ShrunkFileAnswers416AndChangedFileAnswers200) {
  // Without an ETag, If-Range carries Last-Modified: a file cut short under the same mtime gets through to 416.
  serve("qwen3-q4_0.gguf", "noetag/m.gguf", 100);
  auto src = open_source(nginx_->url("noetag/m.gguf"));
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ((*src)->size(), fs::file_size(model("qwen3-q4_0.gguf")));
  EXPECT_EQ((*src)->fingerprint().etag, "");
  EXPECT_NE((*src)->fingerprint().last_modified, "");
  std::vector<uint8_t> buf(4096);
  ASSERT_TRUE((*src)->read(1000, buf.data(), buf.size()).ok());

  fs::path served = nginx_->root() / "noetag" / "m.gguf";
  auto mtime = fs::last_write_time(served);
  fs::resize_file(served, 1000);
  fs::last_write_time(served, mtime);
  Status st = (*src)->read(2'000'000, buf.data(), buf.size());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("416"), std::string::npos) << st.error().message;
  EXPECT_TRUE((*src)->changed());

  serve("qwen3-q4_0.gguf", "n.gguf", 100);
  auto src2 = open_source(nginx_->url("n.gguf"));
  ASSERT_TRUE(src2.ok());
  serve("llama-f16.gguf", "n.gguf", 10);  // larger: the old range exists, but If-Range no longer matches
  st = (*src2)->read(4096, buf.data(), buf.size());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("changed"), std::string::npos) << st.error().message;
  EXPECT_TRUE((*src2)->changed());
}

TEST_F(Http, BadRequestAnswerIsReported) {
  serve("qwen3-q4_0.gguf", "bad400/m.gguf", 100);
  auto src = open_source(nginx_->url("bad400/m.gguf"));
  ASSERT_TRUE(src.ok()) << src.error().message;
  std::vector<uint8_t> buf(100);
  Status st = (*src)->read(0, buf.data(), buf.size());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("400 Bad Request"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("bytes=0-99"), std::string::npos) << st.error().message;
  EXPECT_FALSE((*src)->changed());

  auto missing = open_source(nginx_->url("nope.gguf"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("404"), std::string::npos) << missing.error().message;
}

}  // namespace
}  // namespace df::store
