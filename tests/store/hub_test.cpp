// Models by name against a local nginx that answers the Hugging Face API's paths (refs, tree, resolve) for
// repositories written here: -hf picks the quant as llama.cpp does, downloads every part of a split model into the
// cache (the hub's layout) with its sha256 checked, and run, chat, bench, inspect and ingest work from it; a download
// stopped by a file size limit resumes where it stopped; a wrong sha256 is refused and nothing of it kept; a gated
// repository needs HF_TOKEN; the cache serves when the server is gone; -m URL fetches a file (and its parts).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "diskformer/gguf/split.h"
#include "diskformer/store/hub.h"
#include "diskformer/store/store.h"
#include "store/http_server.h"
#include "store/sha256.h"
#include "store/store_test_util.h"

namespace df::store {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";
constexpr const char* kPrompt = "Once upon a time";

std::string sha256_of(const fs::path& p) {
  detail::Sha256 h;
  const std::string bytes = test::slurp(p);
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

fs::path split_part(uint32_t k) {
  return test::shared_dir() / "models" / "split" / gguf::split_path("qwen3-q4_0", k, 3);
}

TEST(Sha256, KnownVectors) {
  auto hex = [](const std::string& s) {
    detail::Sha256 h;
    h.update(s.data(), s.size());
    return h.hex();
  };
  EXPECT_EQ(hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // A million 'a', fed in pieces that straddle the 64-byte blocks.
  detail::Sha256 h;
  const std::string piece(1001, 'a');
  for (int i = 0; i < 1000; ++i) h.update(piece.data(), i % 2 ? 999 : 1001);
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(HubNames, RepositoryNamesAndQuants) {
  auto r = hub::parse_repo("ggml-org/Qwen3-30B-A3B-GGUF:q4_k_m");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->repo, "ggml-org/Qwen3-30B-A3B-GGUF");
  EXPECT_EQ(r->quant, "q4_k_m");
  EXPECT_EQ(hub::parse_repo("a/b")->quant, "");
  for (const char* bad : {"noslash", "a/b/c", "/b", "a/", "a//b", "a/.b", "a/b:", "a/b:Q4 K", "a b/c", "../x"})
    EXPECT_FALSE(hub::parse_repo(bad).ok()) << bad;

  auto n = hub::name_info("sub/Model-Q4_K_M-00002-of-00005.gguf");
  EXPECT_TRUE(n.gguf);
  EXPECT_EQ(n.prefix, "sub/Model-Q4_K_M");
  EXPECT_EQ(n.tag, "Q4_K_M");
  EXPECT_EQ(n.index, 2u);
  EXPECT_EQ(n.count, 5u);
  EXPECT_EQ(hub::name_info("model.q8_0.gguf").tag, "Q8_0");
  EXPECT_EQ(hub::name_info("model.gguf").count, 1u);
  EXPECT_FALSE(hub::name_info("README.md").gguf);
}

std::vector<hub::RepoFile> files(std::initializer_list<const char*> paths) {
  std::vector<hub::RepoFile> out;
  for (const char* p : paths) out.push_back({p, 1, "", ""});
  return out;
}

std::vector<std::string> picked(const std::vector<hub::RepoFile>& fs, const std::string& quant) {
  auto r = hub::pick_model(fs, quant, "o/r");
  std::vector<std::string> out;
  if (!r.ok()) return {"error: " + r.error().message};
  for (const auto& f : *r) out.push_back(f.path);
  return out;
}

// llama.cpp's find_best_model: the quant asked for (any case, then '.' or '-'), else Q4_K_M, Q8_0, the first GGUF;
// never an mmproj or imatrix file; a split model by its first part, with the others.
TEST(HubNames, PickTheQuantAsLlamaCppDoes) {
  const auto repo = files({"README.md", "mmproj-m-Q4_K_M.gguf", "m-Q2_K.gguf", "m-Q8_0.gguf", "m-Q4_K_M.gguf",
                           "big/m-Q6_K-00002-of-00002.gguf", "big/m-Q6_K-00001-of-00002.gguf", "m-imatrix.gguf"});
  EXPECT_EQ(picked(repo, ""), std::vector<std::string>{"m-Q4_K_M.gguf"});
  EXPECT_EQ(picked(repo, "q2_k"), std::vector<std::string>{"m-Q2_K.gguf"});
  EXPECT_EQ(picked(repo, "Q6_K"),
            (std::vector<std::string>{"big/m-Q6_K-00001-of-00002.gguf", "big/m-Q6_K-00002-of-00002.gguf"}));
  const auto no_q4km = files({"m-Q2_K.gguf", "m-Q8_0.gguf"});
  EXPECT_EQ(picked(no_q4km, ""), std::vector<std::string>{"m-Q8_0.gguf"});
  const auto neither = files({"mmproj-x.gguf", "m-F16.gguf", "m-Q5_0.gguf"});
  EXPECT_EQ(picked(neither, ""), std::vector<std::string>{"m-F16.gguf"});
  auto none = picked(neither, "Q3_K_S");
  ASSERT_EQ(none.size(), 1u);
  EXPECT_NE(none[0].find("no model GGUF of quant Q3_K_S"), std::string::npos) << none[0];
  EXPECT_NE(none[0].find("m-Q5_0.gguf"), std::string::npos) << none[0];
  auto gap = picked(files({"m-Q6_K-00001-of-00003.gguf", "m-Q6_K-00003-of-00003.gguf"}), "");
  ASSERT_EQ(gap.size(), 1u);
  EXPECT_NE(gap[0].find("has no part 2"), std::string::npos) << gap[0];
}

class Hub : public ::testing::Test {
 protected:
  void SetUp() override {
    auto bin = test::find_nginx();
    if (!bin) GTEST_SKIP() << "nginx is not installed (Debian package nginx-light): -hf and -m URL not tested";
    if (!fs::exists(split_part(0))) GTEST_SKIP() << "missing shared split model";
    tmp_ = test::temp_dir("hub");
    nginx_ = std::make_unique<test::Nginx>(*bin, tmp_ / "nginx");
    ASSERT_EQ(nginx_->start(), "");
    cache_ = tmp_ / "cache";
    ::setenv("DISKFORMER_CACHE", cache_.c_str(), 1);
    ::setenv("HF_ENDPOINT", nginx_->url("").c_str(), 1);
    ::unsetenv("MODEL_ENDPOINT");
    ::unsetenv("HF_TOKEN");
  }
  void TearDown() override {
    if (nginx_) nginx_->stop();
    ::unsetenv("DISKFORMER_CACHE");
    ::unsetenv("HF_ENDPOINT");
    ::unsetenv("HF_TOKEN");
  }

  // A repository at `under` (a folder of the server's root): the API's refs and tree answers and each file at its
  // resolve path. `sha256` overrides what the listing says of a file (a wrong checksum).
  void publish(const std::string& repo, const std::vector<std::pair<std::string, fs::path>>& contents,
               const std::string& under = "", const std::map<std::string, std::string>& sha256 = {}) {
    const fs::path root = nginx_->root() / under;
    const fs::path api = root / "api" / "models" / repo;
    fs::create_directories(api / "tree");
    std::ofstream(api / "refs") << json{{"branches", {{{"name", "main"}, {"ref", "refs/heads/main"},
                                                        {"targetCommit", kCommit}}}},
                                        {"converts", json::array()}, {"tags", json::array()}}.dump();
    json tree = json::array();
    tree.push_back({{"type", "directory"}, {"oid", std::string(40, 'd')}, {"size", 0}, {"path", "sub"}});
    for (const auto& [path, src] : contents) {
      const fs::path dst = root / repo / "resolve" / kCommit / path;
      fs::create_directories(dst.parent_path());
      test::copy_writable(src, dst);
      json item{{"type", "file"}, {"oid", std::string(40, 'a')}, {"size", fs::file_size(src)}, {"path", path}};
      if (path.ends_with(".gguf")) {
        auto it = sha256.find(path);
        item["lfs"] = {{"oid", it != sha256.end() ? it->second : sha256_of(src)}, {"size", fs::file_size(src)},
                       {"pointerSize", 134}};
      }
      tree.push_back(item);
    }
    std::ofstream(api / "tree" / kCommit) << tree.dump();
  }
  void publish_split(const std::string& repo, const std::string& under = "") {
    std::ofstream(tmp_ / "README.md") << "a model in three parts\n";
    publish(repo,
            {{"README.md", tmp_ / "README.md"},
             {"qwen3-q4_0-00001-of-00003.gguf", split_part(0)},
             {"qwen3-q4_0-00002-of-00003.gguf", split_part(1)},
             {"qwen3-q4_0-00003-of-00003.gguf", split_part(2)}},
            under);
  }
  // The single file's greedy bytes: what every way of naming the split model must print.
  std::string expected() {
    auto r = run({"run", "-m", (test::shared_dir() / "models" / "qwen3-q4_0.gguf").string(), "-p", kPrompt, "-n",
                  "16", "--temp", "0", "-t", "1", "--quiet"});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_FALSE(r.out.empty());
    return r.out;
  }
  test::CliRun run(const std::vector<std::string>& args, const test::SpawnOptions& o = {}) {
    return test::run_cli(args, tmp_, o);
  }
  std::vector<std::string> run_args(const std::string& hf) {
    return {"run", "-hf", hf, "-p", kPrompt, "-n", "16", "--temp", "0", "-t", "1"};
  }
  fs::path repo_dir(const std::string& repo) {
    std::string f = "models--" + repo;
    f.replace(f.find('/'), 1, "--");
    return cache_ / f;
  }

  fs::path tmp_, cache_;
  std::unique_ptr<test::Nginx> nginx_;
};

TEST_F(Hub, RunFetchesEveryPartIntoTheHubLayout) {
  publish_split("test-org/split-GGUF");
  const std::string want = expected();
  auto r = run(run_args("test-org/split-GGUF:Q4_0"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, want);
  EXPECT_NE(r.err.find("sha256 checked"), std::string::npos) << r.err;

  const fs::path dir = repo_dir("test-org/split-GGUF");
  EXPECT_EQ(test::slurp(dir / "refs" / "main"), kCommit);
  for (uint32_t k = 0; k < 3; ++k) {
    const std::string sha = sha256_of(split_part(k));
    EXPECT_TRUE(fs::is_regular_file(dir / "blobs" / sha)) << k;
    const fs::path entry = dir / "snapshots" / kCommit / gguf::split_path("qwen3-q4_0", k, 3);
    EXPECT_TRUE(fs::is_symlink(entry)) << entry;
    EXPECT_EQ(fs::read_symlink(entry), fs::path("../../blobs") / sha);
  }
  EXPECT_FALSE(fs::exists(dir / "snapshots" / kCommit / "README.md")) << "only the model's files are fetched";

  // Again: nothing to fetch. Without a quant: no Q4_K_M or Q8_0 there, so the first model GGUF, the same parts.
  auto again = run(run_args("test-org/split-GGUF"));
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, want);
  EXPECT_NE(again.err.find("(in the cache)"), std::string::npos) << again.err;
  EXPECT_EQ(again.err.find("fetched"), std::string::npos) << again.err;
}

TEST_F(Hub, EveryCommandTakesARepository) {
  publish_split("test-org/split-GGUF");
  const std::string hf = "test-org/split-GGUF:q4_0";
  auto inspect = run({"inspect", "-hf", hf, "--json"});
  ASSERT_EQ(inspect.code, 0) << inspect.err;
  auto j = json::parse(inspect.out);
  ASSERT_EQ(j["parts"].size(), 3u);
  EXPECT_EQ(j["tensors"].size(), 47u);

  auto bench = run({"bench", "-hf", hf, "-p", "8", "-n", "4", "-r", "1", "-t", "1", "--backend", "cpu", "--json"});
  ASSERT_EQ(bench.code, 0) << bench.err;
  EXPECT_GT(json::parse(bench.out)["decode_tok_s"]["median"].get<double>(), 0);

  std::ofstream(tmp_ / "chat.in") << "Hello\n";
  const std::string chat_cmd = test::cli_path().string() + " chat -hf " + hf + " -n 4 --temp 0 -t 1 --quiet < " +
                               (tmp_ / "chat.in").string() + " > " + (tmp_ / "chat.out").string() + " 2> " +
                               (tmp_ / "chat.err").string();
  EXPECT_EQ(std::system(chat_cmd.c_str()), 0) << test::slurp(tmp_ / "chat.err");
  EXPECT_FALSE(test::slurp(tmp_ / "chat.out").empty());

  // ingest -hf: from the cache into the store, the single file's records.
  auto ingest = run({"ingest", "-hf", hf, "--store", (tmp_ / "store").string(), "--quiet"});
  ASSERT_EQ(ingest.code, 0) << ingest.err;
  auto single = run({"ingest", "-m", (test::shared_dir() / "models" / "qwen3-q4_0.gguf").string(), "--store",
                     (tmp_ / "single").string(), "--quiet"});
  ASSERT_EQ(single.code, 0) << single.err;
  EXPECT_TRUE(test::slurp(tmp_ / "store" / kDataFile) == test::slurp(tmp_ / "single" / kDataFile));
  auto from_store = run({"run", "--store", (tmp_ / "store").string(), "-hf", hf, "-p", kPrompt, "-n", "16", "--temp",
                         "0", "-t", "1", "--quiet"});
  ASSERT_EQ(from_store.code, 0) << from_store.err;
  EXPECT_EQ(from_store.out, expected());

  // -hff names a file; a part of a split model brings the others.
  auto file = run({"inspect", "-hf", "test-org/split-GGUF", "-hff", "qwen3-q4_0-00002-of-00003.gguf", "--json"});
  ASSERT_EQ(file.code, 0) << file.err;
  EXPECT_EQ(json::parse(file.out)["parts"].size(), 3u);
  auto missing = run({"inspect", "-hf", "test-org/split-GGUF", "-hff", "nope.gguf"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("no file nope.gguf"), std::string::npos) << missing.err;
  auto usage = run({"inspect", "-hf", "not a repo"});
  EXPECT_EQ(usage.code, 2) << usage.err;
  auto both = run({"inspect", "-hf", hf, "-m", "x.gguf"});
  EXPECT_EQ(both.code, 2) << both.err;
  auto no_quant = run({"inspect", "-hf", "test-org/split-GGUF:Q8_0"});
  EXPECT_EQ(no_quant.code, 1);
  EXPECT_NE(no_quant.err.find("no model GGUF of quant Q8_0"), std::string::npos) << no_quant.err;
}

// A file size limit stops the first part's download part-way (the write fails: EFBIG); run again, it resumes at
// the partial file's end and the model runs as the single file does.
TEST_F(Hub, AnInterruptedDownloadResumes) {
  publish_split("test-org/split-GGUF");
  const uint64_t limit = 1 << 20;
  ASSERT_GT(fs::file_size(split_part(0)), limit);
  auto stopped = run(run_args("test-org/split-GGUF:Q4_0"), {.max_file_bytes = static_cast<long>(limit)});
  ASSERT_EQ(stopped.code, 1) << stopped.err;
  EXPECT_NE(stopped.err.find("run again to resume"), std::string::npos) << stopped.err;
  const fs::path partial = repo_dir("test-org/split-GGUF") / "blobs" / (sha256_of(split_part(0)) + ".partial");
  ASSERT_TRUE(fs::exists(partial)) << stopped.err;
  EXPECT_EQ(fs::file_size(partial), limit);

  auto resumed = run(run_args("test-org/split-GGUF:Q4_0"));
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming qwen3-q4_0-00001-of-00003.gguf at 1.00 MiB"), std::string::npos)
      << resumed.err;
  EXPECT_EQ(resumed.out, expected());
  EXPECT_FALSE(fs::exists(partial));
  EXPECT_FALSE(fs::exists(partial.string() + ".json"));
}

TEST_F(Hub, AWrongChecksumIsRefusedAndNotKept) {
  const std::string wrong(64, 'e');
  publish("test-org/bad-GGUF", {{"m-Q4_0.gguf", test::shared_dir() / "models" / "qwen3-q4_0.gguf"}}, "",
          {{"m-Q4_0.gguf", wrong}});
  auto r = run(run_args("test-org/bad-GGUF"));
  EXPECT_EQ(r.code, 1);
  const std::string real = sha256_of(test::shared_dir() / "models" / "qwen3-q4_0.gguf");
  EXPECT_NE(r.err.find("sha256 is " + real + ", the repository says " + wrong), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
  const fs::path dir = repo_dir("test-org/bad-GGUF");
  EXPECT_FALSE(fs::exists(dir / "blobs" / wrong));
  EXPECT_FALSE(fs::exists(dir / "blobs" / (wrong + ".partial")));
  EXPECT_FALSE(fs::exists(dir / "snapshots" / kCommit / "m-Q4_0.gguf"));
}

TEST_F(Hub, AGatedRepositoryNeedsItsToken) {
  publish_split("test-org/gated-GGUF", "private");
  ::setenv("HF_ENDPOINT", nginx_->url("private/").c_str(), 1);
  auto refused = run(run_args("test-org/gated-GGUF"));
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("status 401"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("set HF_TOKEN"), std::string::npos) << refused.err;
  auto ok = run(run_args("test-org/gated-GGUF"), {.env = {std::string("HF_TOKEN=") + test::Nginx::kToken}});
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out, expected());
  EXPECT_EQ(ok.err.find(test::Nginx::kToken), std::string::npos) << "the token was shown";
}

TEST_F(Hub, TheCacheServesWhenTheServerIsGone) {
  publish_split("test-org/split-GGUF");
  const std::string want = expected();
  ASSERT_EQ(run(run_args("test-org/split-GGUF:Q4_0")).code, 0);
  const std::string url = nginx_->url("test-org/split-GGUF/resolve/") + kCommit + "/qwen3-q4_0-00001-of-00003.gguf";
  auto by_url = run({"run", "-m", url, "-p", kPrompt, "-n", "16", "--temp", "0", "-t", "1"});
  ASSERT_EQ(by_url.code, 0) << by_url.err;
  EXPECT_EQ(by_url.out, want);
  const fs::path url_dir = cache_ / "url" / ("127.0.0.1:" + std::to_string(nginx_->port()));
  for (uint32_t k = 0; k < 3; ++k) {
    const fs::path f = url_dir / gguf::split_path("qwen3-q4_0", k, 3);
    EXPECT_EQ(sha256_of(f), sha256_of(split_part(k))) << f;
    auto meta = json::parse(test::slurp(f.string() + ".json"));
    EXPECT_EQ(meta["sha256"], sha256_of(split_part(k)));
  }
  auto cached_url = run({"run", "-m", url, "-p", kPrompt, "-n", "16", "--temp", "0", "-t", "1"});
  ASSERT_EQ(cached_url.code, 0) << cached_url.err;
  EXPECT_NE(cached_url.err.find("(in the cache)"), std::string::npos) << cached_url.err;

  nginx_->stop();
  auto offline = run(run_args("test-org/split-GGUF:Q4_0"));
  ASSERT_EQ(offline.code, 0) << offline.err;
  EXPECT_EQ(offline.out, want);
  EXPECT_NE(offline.err.find(std::string("using the cached snapshot ") + kCommit), std::string::npos) << offline.err;
  auto offline_url = run({"run", "-m", url, "-p", kPrompt, "-n", "16", "--temp", "0", "-t", "1"});
  ASSERT_EQ(offline_url.code, 0) << offline_url.err;
  EXPECT_EQ(offline_url.out, want);
  EXPECT_NE(offline_url.err.find("using the cached"), std::string::npos) << offline_url.err;
  auto never = run(run_args("test-org/other-GGUF"));
  EXPECT_EQ(never.code, 1);
  EXPECT_NE(never.err.find("names no cached commit"), std::string::npos) << never.err;
}

// ingest -m URL of a split model's first part reads every part straight into the store.
TEST_F(Hub, IngestReadsASplitModelsPartsByUrl) {
  for (uint32_t k = 0; k < 3; ++k) test::copy_writable(split_part(k), nginx_->root() / gguf::split_path("m", k, 3));
  auto r = run({"ingest", "-m", nginx_->url("m-00001-of-00003.gguf"), "--store", (tmp_ / "url").string(), "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto single = run({"ingest", "-m", (test::shared_dir() / "models" / "qwen3-q4_0.gguf").string(), "--store",
                     (tmp_ / "single").string(), "--quiet"});
  ASSERT_EQ(single.code, 0) << single.err;
  EXPECT_TRUE(test::slurp(tmp_ / "url" / kDataFile) == test::slurp(tmp_ / "single" / kDataFile));
  auto m = json::parse(test::slurp(tmp_ / "url" / kManifestFile));
  EXPECT_EQ(m["split_parts"][1]["location"], nginx_->url("m-00003-of-00003.gguf"));
  EXPECT_FALSE(m["split_parts"][1]["etag"].get<std::string>().empty());
  EXPECT_TRUE(!fs::exists(cache_) || fs::is_empty(cache_)) << "ingest -m URL fetches nothing into the cache";
}

}  // namespace
}  // namespace df::store
