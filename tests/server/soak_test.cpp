// Load: 64 greedy requests from 8 concurrent clients over 4 slots, each reply equal to the reply the request gets
// alone (the decode steps batch the slots together, prompts are prefilled between them, prefixes are reused); then
// SIGTERM in the middle of a stream stops the server cleanly.
#include <gtest/gtest.h>

#include <thread>

#include "server/http_client.h"
#include "server/serve_process.h"

namespace df::test {
namespace {

using json = nlohmann::json;

struct Ask {
  bool chat;
  bool stream;
  json body;
};

std::string reply_of(int port, const Ask& a) {
  const std::string path = a.chat ? "/v1/chat/completions" : "/v1/completions";
  if (!a.stream) {
    const HttpResponse r = post_json(port, path, a.body);
    if (r.status != 200) return "HTTP " + std::to_string(r.status) + " " + r.body;
    const json j = r.json();
    return a.chat ? j["choices"][0]["message"]["content"].get<std::string>() : j["choices"][0]["text"].get<std::string>();
  }
  json body = a.body;
  body["stream"] = true;
  const Stream s = post_stream(port, path, body);
  if (s.status != 200 || s.events.empty() || s.events.back() != "[DONE]") return "stream failed: " + s.body;
  std::string text;
  for (size_t i = 0; i + 1 < s.events.size(); ++i) {
    const json e = json::parse(s.events[i]);
    if (e["choices"].empty()) continue;
    const json& c = e["choices"][0];
    if (a.chat && c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    if (!a.chat) text += c["text"].get<std::string>();
  }
  return text;
}

std::vector<Ask> asks() {
  std::string scripture = "These are the generations of the heavens and of the earth when they were created, in the "
                          "day that the LORD God made the earth and the heavens, and every plant of the field before "
                          "it was in the earth, and every herb of the field before it grew: for the LORD God had not "
                          "caused it to rain upon the earth, and there was not a man to till the ground.";
  std::vector<Ask> a;
  const char* users[] = {"Who made the heaven?", "Tell me of Moses.", "What is the law?", "Sing a psalm."};
  for (int i = 0; i < 4; ++i)
    a.push_back({true, i % 2 == 1,
                 {{"messages", {{{"role", "user"}, {"content", users[i]}}}}, {"max_tokens", 20 + 2 * i},
                  {"temperature", 0}}});
  // Completions sharing a prefix of 64 tokens and more (reused across requests and slots: batches that long take
  // the one-row orders, so reusing them never changes a reply).
  for (int i = 0; i < 3; ++i)
    a.push_back({false, i == 1,
                 {{"prompt", scripture + (i == 0 ? "" : i == 1 ? " And" : " For")}, {"max_tokens", 24},
                  {"temperature", 0}, {"ignore_eos", true}}});
  a.push_back({false, false, {{"prompt", "In the beginning"}, {"max_tokens", 16}, {"temperature", 0}}});
  return a;
}

TEST(Soak, SixtyFourRequestsFromEightClientsGiveTheSingleClientReplies) {
  const auto model = kjv_model();
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "missing " << model;
  const std::vector<Ask> all = asks();
  // The replies each request gets alone, from a server with one slot.
  std::vector<std::string> alone;
  {
    ServeProcess one({"-m", model.string(), "-t", "2", "-c", "512", "--parallel", "1", "--quiet"});
    DF_REQUIRE_SERVER(one);
    for (const Ask& a : all) alone.push_back(reply_of(one.port(), a));
    EXPECT_EQ(one.terminate(), 0);
  }
  ServeProcess srv({"-m", model.string(), "-t", "2", "-c", "512", "--parallel", "4", "--quiet"});
  DF_REQUIRE_SERVER(srv);
  constexpr int kClients = 8, kEach = 8;
  std::vector<std::vector<std::pair<size_t, std::string>>> got(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < kEach; ++i) {
        const size_t k = size_t(c + i * 3) % all.size();
        got[size_t(c)].push_back({k, reply_of(srv.port(), all[k])});
      }
    });
  for (auto& t : clients) t.join();
  int n = 0;
  for (int c = 0; c < kClients; ++c)
    for (const auto& [k, text] : got[size_t(c)]) {
      ++n;
      EXPECT_EQ(text, alone[k]) << "client " << c << ", request " << k;
    }
  EXPECT_EQ(n, 64);
  // The decode steps ran several sequences at once, and prompts were reused from the slots' caches.
  const std::string m = http(srv.port(), "GET", "/metrics").body;
  auto value = [&](const std::string& name) {
    const size_t at = m.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + name.size() + 2));
  };
  EXPECT_GT(value("diskformer_decoded_tokens_total"), 1.5 * value("diskformer_decode_steps_total")) << m;
  EXPECT_GT(value("diskformer_prompt_tokens_cached_total"), 0) << m;
  EXPECT_EQ(value("diskformer_generations_total"), 64) << m;
  EXPECT_EQ(value("diskformer_slots_busy"), 0) << m;
  EXPECT_EQ(srv.terminate(), 0) << srv.err();
}

TEST(Soak, SigtermEndsStreamsWithAnErrorAndExitsZero) {
  const auto model = kjv_model();
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "missing " << model;
  ServeProcess srv({"-m", model.string(), "-t", "2", "--parallel", "2"});
  DF_REQUIRE_SERVER(srv);
  json body = {{"messages", {{{"role", "user"}, {"content", "Tell me all the law."}}}}, {"max_tokens", 1500},
               {"ignore_eos", true}, {"stream", true}};
  bool signalled = false;
  // At the first event the server is told to stop; the stream is read on to its end.
  const Stream s = post_stream(srv.port(), "/v1/chat/completions", body, [&](const std::string&) {
    if (!signalled) ::kill(srv.pid(), SIGTERM);
    signalled = true;
    return true;
  });
  // The stream ended properly (its last chunk read) with an error object naming the reason.
  ASSERT_FALSE(s.events.empty()) << s.body;
  const json last = json::parse(s.events.back(), nullptr, false);
  ASSERT_TRUE(last.is_object() && last.contains("error")) << s.events.back();
  EXPECT_EQ(last["error"]["code"], "server_shutting_down");
  const int status = srv.terminate();  // waits for the exit (a second SIGTERM changes nothing)
  EXPECT_EQ(status, 0) << srv.err();
  EXPECT_NE(srv.err().find("stopped"), std::string::npos) << srv.err();
}

}  // namespace
}  // namespace df::test
