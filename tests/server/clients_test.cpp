// Real clients: the official openai npm package, and the chat page in headless Chromium (Debian's chromium steered
// by playwright-core). Both skip with a message where node, the packages (scripts/setup.sh installs them into
// tests/server/node) or chromium are absent.
#include <gtest/gtest.h>

#include <cstdio>
#include <iostream>

#include "server/http_client.h"
#include "server/serve_process.h"

namespace df::test {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

fs::path node_dir() { return source_dir() / "tests" / "server" / "node"; }

std::string find_node() {
  for (const char* p : {"/usr/bin/node", "/usr/local/bin/node", "/usr/bin/nodejs"})
    if (fs::exists(p)) return p;
  return "";
}

// Runs a node script; its stdout (the last line is the result) and exit status.
std::pair<int, std::string> run_node(const std::string& node, const std::string& args) {
  const auto dir = temp_dir("node");
  const std::string cmd = "cd " + node_dir().string() + " && " + node + " " + args + " 2>" + (dir / "err").string();
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  if (WEXITSTATUS(st) != 0) out += "\nstderr: " + slurp(dir / "err");
  return {WEXITSTATUS(st), out};
}

json last_json_line(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  if (end == std::string::npos) return json();
  const size_t start = out.rfind('\n', end);
  return json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end + 1), nullptr, false);
}

std::string chat_reply(int port, const json& messages, int max_tokens) {
  const HttpResponse r = post_json(port, "/v1/chat/completions",
                                   {{"messages", messages}, {"max_tokens", max_tokens}, {"temperature", 0}});
  return r.status == 200 ? r.json()["choices"][0]["message"]["content"].get<std::string>() : "HTTP error " + r.body;
}

TEST(Clients, TheOfficialOpenAiPackage) {
  const std::string node = find_node();
  if (node.empty()) GTEST_SKIP() << "node is not installed";
  if (!fs::exists(node_dir() / "node_modules" / "openai"))
    GTEST_SKIP() << "the openai package is not installed (scripts/setup.sh: npm ci --prefix tests/server/node)";
  if (!fs::exists(kjv_model())) GTEST_SKIP() << "missing " << kjv_model();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "--api-key", "k-123", "--alias", "kjv"});
  DF_REQUIRE_SERVER(srv);
  const auto [code, out] = run_node(node, "openai_check.mjs " + std::to_string(srv.port()) + " k-123");
  ASSERT_EQ(code, 0) << out;
  const json r = last_json_line(out);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_EQ(r["models"], json::array({"kjv"}));
  const std::map<std::string, std::string> key = {{"Authorization", "Bearer k-123"}};
  const json messages = {{{"role", "user"}, {"content", "Who was king of Judah?"}}};
  const HttpResponse raw = post_json(srv.port(), "/v1/chat/completions",
                                     {{"messages", messages}, {"max_tokens", 24}, {"temperature", 0}}, key);
  ASSERT_EQ(raw.status, 200) << raw.body;
  const std::string expected = raw.json()["choices"][0]["message"]["content"];
  EXPECT_EQ(r["whole"], expected);
  EXPECT_EQ(r["streamed"], expected);
  EXPECT_EQ(r["whole_finish"], "length");
  EXPECT_EQ(r["stream_finish"], "length");
  EXPECT_EQ(r["whole_usage"]["completion_tokens"], 24);
  EXPECT_EQ(r["stream_usage"]["completion_tokens"], 24);
  const HttpResponse rawc = post_json(srv.port(), "/v1/completions",
                                      {{"prompt", "In the beginning"}, {"max_tokens", 16}, {"temperature", 0}}, key);
  EXPECT_EQ(r["completion"], rawc.json()["choices"][0]["text"]);
  EXPECT_EQ(r["error_status"], 400);
  EXPECT_EQ(srv.terminate(), 0);
}

TEST(Clients, TheChatPageInHeadlessChromium) {
  const std::string node = find_node();
  const char* chromium = std::getenv("CHROMIUM") ? std::getenv("CHROMIUM") : "/usr/bin/chromium";
  if (node.empty()) GTEST_SKIP() << "node is not installed";
  if (!fs::exists(chromium)) GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs Debian's)";
  if (!fs::exists(node_dir() / "node_modules" / "playwright-core"))
    GTEST_SKIP() << "playwright-core is not installed (scripts/setup.sh: npm ci --prefix tests/server/node)";
  if (!fs::exists(kjv_model())) GTEST_SKIP() << "missing " << kjv_model();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "--parallel", "2"});
  DF_REQUIRE_SERVER(srv);
  const std::string message = "Who made the heaven and the earth?";
  // Kept after the run (the scratch directory goes when the tests pass), for a person to look at.
  fs::create_directories(DF_TEST_ARTIFACTS);
  const fs::path shot = fs::path(DF_TEST_ARTIFACTS) / "chat-page.png";
  fs::remove(shot);
  const auto [code, out] = run_node(node, "page_check.mjs " + std::to_string(srv.port()) + " " + shot.string() +
                                              " '" + message + "' 24");
  ASSERT_EQ(code, 0) << out;
  const json r = last_json_line(out);
  ASSERT_TRUE(r.is_object()) << out;
  std::cout << "screenshot of the chat page: " << shot.string() << std::endl;
  RecordProperty("screenshot", shot.string());
  EXPECT_TRUE(fs::exists(shot) && fs::file_size(shot) > 1000) << shot;
  // The page's streamed reply is the API's greedy reply to the same conversation.
  EXPECT_EQ(r["reply"], chat_reply(srv.port(), {{{"role", "user"}, {"content", message}}}, 24));
  EXPECT_NE(r["meta"].get<std::string>().find("24 tokens"), std::string::npos) << r["meta"];
  // The panel shows what the server reports.
  const std::string decode = r["panel"]["m-decode"].get<std::string>();
  EXPECT_NE(decode.find("tok/s"), std::string::npos) << r["panel"];
  EXPECT_GT(std::atof(decode.c_str()), 0.0) << "the panel shows no decode rate after a reply: " << r["panel"];
  EXPECT_NE(r["panel"]["m-disk"].get<std::string>().find("MiB"), std::string::npos) << r["panel"];
  EXPECT_EQ(r["panel"]["m-gpu"], "not used") << r["panel"];
  EXPECT_EQ(r["panel"]["m-hits"], "all resident") << r["panel"];
  // Stop ended the second reply early; the conversation survived a reload; nothing came from another origin.
  EXPECT_FALSE(r["stopped_reply"].get<std::string>().empty());
  EXPECT_EQ(r["messages_after_reload"],
            json::array({"msg user", "msg assistant", "msg user", "msg assistant"}));
  EXPECT_EQ(r["foreign"], json::array()) << r["foreign"];
  EXPECT_EQ(r["console_errors"], json::array()) << r["console_errors"];
  EXPECT_EQ(metric_reaching(srv.port(), "diskformer_generations_cancelled_total", 1), 1u);  // Stop freed the slot
  EXPECT_EQ(srv.terminate(), 0);
}

}  // namespace
}  // namespace df::test
