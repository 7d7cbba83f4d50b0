// A URL's login never reaches a file or a log (shown as user:***), and it can come from DISKFORMER_HTTP_AUTH or a
// netrc instead of the command line; a server that sends its headers and then nothing fails after --timeout, each
// retry said on stderr with its reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "diskformer/store/store.h"
#include "store/http_server.h"
#include "store/store_test_util.h"

namespace df::store {
namespace {

namespace fs = std::filesystem;
using test::Nginx;

class HttpLogin : public ::testing::Test {
 protected:
  void SetUp() override {
    auto bin = test::find_nginx();
    if (!bin) GTEST_SKIP() << "nginx is not installed (Debian package nginx-light): URL ingest not tested";
    if (!fs::exists(model())) GTEST_SKIP() << "missing shared models";
    tmp_ = test::temp_dir("http_login");
    nginx_ = std::make_unique<Nginx>(*bin, tmp_ / "nginx");
    ASSERT_EQ(nginx_->start(), "");
    test::copy_writable(model(), nginx_->root() / "auth" / "m.gguf");
  }
  void TearDown() override {
    if (nginx_) nginx_->stop();
  }
  static fs::path model() { return test::shared_dir() / "models" / "qwen3-q4_0.gguf"; }
  std::string url_with_login() const {
    return "http://" + std::string(Nginx::kUser) + ":" + Nginx::kPassword + "@127.0.0.1:" +
           std::to_string(nginx_->port()) + "/auth/m.gguf";
  }
  // Every byte under dir, for looking for the password.
  static std::string all_bytes(const fs::path& dir) {
    std::string out;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file()) out += test::slurp(e.path());
    return out;
  }

  fs::path tmp_;
  std::unique_ptr<Nginx> nginx_;
};

TEST_F(HttpLogin, PasswordInTheUrlStaysOutOfFilesAndLogs) {
  const fs::path dir = tmp_ / "store";
  const std::string shown = "http://" + std::string(Nginx::kUser) + ":***@127.0.0.1:" + std::to_string(nginx_->port()) +
                            "/auth/m.gguf";
  // Interrupted once: the checkpoint file holds the location too.
  const pid_t pid = test::spawn_cli({"ingest", "-m", url_with_login(), "--store", dir.string(), "--limit-rate", "1M",
                                     "--checkpoint-every", "64K"},
                                    (tmp_ / "k.out").string(), (tmp_ / "k.err").string());
  for (int i = 0; i < 1000 && !fs::exists(dir / kProgressFile); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ::kill(pid, SIGKILL);
  test::wait_child(pid);
  ASSERT_TRUE(fs::exists(dir / kProgressFile));
  const std::string progress = test::slurp(dir / kProgressFile);
  EXPECT_EQ(progress.find(Nginx::kPassword), std::string::npos) << progress;
  EXPECT_NE(progress.find(shown), std::string::npos) << progress;

  auto r = test::run_cli({"ingest", "-m", url_with_login(), "--store", dir.string(), "--json"}, tmp_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find(Nginx::kPassword), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find(Nginx::kPassword), std::string::npos) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["source"], shown);
  EXPECT_EQ(all_bytes(dir).find(Nginx::kPassword), std::string::npos) << "the password is in a store file";
  EXPECT_EQ(nlohmann::json::parse(test::slurp(dir / kManifestFile))["source"]["location"], shown);

  // The same file with the login given another way is the same source: nothing to do.
  auto again = test::run_cli({"ingest", "-m", nginx_->url("auth/m.gguf"), "--store", dir.string()}, tmp_,
                             {.env = {std::string("DISKFORMER_HTTP_AUTH=") + Nginx::kUser + ":" + Nginx::kPassword}});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.err.find("up to date"), std::string::npos) << again.err;
}

TEST_F(HttpLogin, NoLoginIsRefusedWithWhereToGiveOne) {
  auto r = test::run_cli({"ingest", "-m", nginx_->url("auth/m.gguf"), "--store", (tmp_ / "none").string()}, tmp_,
                         {.env = {"NETRC=" + (tmp_ / "no-netrc").string()}});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("401"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("DISKFORMER_HTTP_AUTH"), std::string::npos) << r.err;

  auto wrong = test::run_cli({"ingest", "-m", "http://" + std::string(Nginx::kUser) + ":wrong@127.0.0.1:" +
                                                std::to_string(nginx_->port()) + "/auth/m.gguf",
                              "--store", (tmp_ / "wrong").string()},
                             tmp_);
  EXPECT_EQ(wrong.code, 1);
  EXPECT_NE(wrong.err.find("refused the login for " + std::string(Nginx::kUser)), std::string::npos) << wrong.err;
  EXPECT_EQ(wrong.err.find(":wrong@"), std::string::npos) << wrong.err;
}

TEST_F(HttpLogin, LoginFromTheEnvironmentOrANetrc) {
  const std::string login = std::string(Nginx::kUser) + ":" + Nginx::kPassword;
  auto env = test::run_cli({"ingest", "-m", nginx_->url("auth/m.gguf"), "--store", (tmp_ / "env").string(), "--quiet"},
                           tmp_, {.env = {"DISKFORMER_HTTP_AUTH=" + login}});
  ASSERT_EQ(env.code, 0) << env.err;
  EXPECT_EQ(all_bytes(tmp_ / "env").find(Nginx::kPassword), std::string::npos);

  const fs::path netrc = tmp_ / "netrc";
  std::ofstream(netrc) << "machine 127.0.0.1 login " << Nginx::kUser << " password " << Nginx::kPassword << "\n";
  fs::permissions(netrc, fs::perms::owner_read | fs::perms::owner_write);
  auto from_netrc = test::run_cli(
      {"ingest", "-m", nginx_->url("auth/m.gguf"), "--store", (tmp_ / "netrc-store").string(), "--quiet"}, tmp_,
      {.env = {"NETRC=" + netrc.string()}});
  ASSERT_EQ(from_netrc.code, 0) << from_netrc.err;
  EXPECT_TRUE(test::slurp(tmp_ / "env" / kDataFile) == test::slurp(tmp_ / "netrc-store" / kDataFile));
}

TEST(HttpTimeout, ServerThatStallsAfterItsHeadersFailsAfterTheTimeout) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  const fs::path tmp = test::temp_dir("http_stall");
  test::copy_writable(model, tmp / "m.gguf");
  test::BareHttp server(tmp / "m.gguf");
  server.stall(true);
  auto r = test::run_cli({"ingest", "-m", server.url(), "--store", (tmp / "store").string(), "--timeout", "3"}, tmp);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("retrying in"), std::string::npos) << "each retry is said, with its reason\n" << r.err;
  EXPECT_NE(r.err.find("no data for"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the timeout (ingest --timeout)"), std::string::npos) << r.err;
  EXPECT_GE(server.stalled(), 2) << "a stalled attempt is retried on a new connection within the timeout";
  EXPECT_FALSE(fs::exists(tmp / "store" / kManifestFile));
}

}  // namespace
}  // namespace df::store
