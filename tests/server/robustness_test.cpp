// Bad input and bad clients, on 127.0.0.1: API keys, malformed and ill-typed requests, contexts too small, bodies
// over the limit, headers sent a byte at a time, clients that go away mid-reply. Each gets an OpenAI-style error
// object (or its generation stops and its slot is freed), and the server goes on serving the others with its memory
// bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "server/http_client.h"
#include "server/serve_process.h"

namespace df::test {
namespace {

using json = nlohmann::json;

#define REQUIRE_KJV() \
  if (!std::filesystem::exists(kjv_model())) GTEST_SKIP() << "missing " << kjv_model()

// An OpenAI error object with this status, type and (where given) param.
void expect_error(const HttpResponse& r, int status, const std::string& type, const std::string& param = "",
                  const std::string& what = "") {
  EXPECT_EQ(r.status, status) << what << ": " << r.body;
  const json j = r.json();
  ASSERT_TRUE(j.is_object() && j.contains("error")) << what << ": " << r.body;
  EXPECT_EQ(j["error"]["type"], type) << what;
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty()) << what;
  if (!param.empty()) {
    EXPECT_EQ(j["error"]["param"], param) << what << ": " << r.body;
  }
  EXPECT_EQ(r.headers.count("content-type") ? r.headers.at("content-type") : "", "application/json") << what;
}

json chat(const std::string& text, int max_tokens = 4) {
  return {{"messages", {{{"role", "user"}, {"content", text}}}}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

TEST(Robustness, EveryApiRouteNeedsTheKey) {
  REQUIRE_KJV();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "--api-key", "s3cret"});
  DF_REQUIRE_SERVER(srv);
  const std::map<std::string, std::string> good = {{"Authorization", "Bearer s3cret"}},
                                           bad = {{"Authorization", "Bearer s3crex"}},
                                           scheme = {{"Authorization", "Basic s3cret"}};
  const json completion = {{"prompt", "And"}, {"max_tokens", 2}};
  for (const auto* headers : {static_cast<const std::map<std::string, std::string>*>(nullptr), &bad, &scheme}) {
    const auto h = headers ? *headers : std::map<std::string, std::string>{};
    expect_error(http(srv.port(), "GET", "/v1/models", "", h), 401, "authentication_error", "", "models");
    expect_error(post_json(srv.port(), "/v1/chat/completions", chat("Hi"), h), 401, "authentication_error", "", "chat");
    expect_error(post_json(srv.port(), "/v1/completions", completion, h), 401, "authentication_error", "", "cmpl");
    expect_error(http(srv.port(), "GET", "/metrics", "", h), 401, "authentication_error", "", "metrics");
    EXPECT_EQ(http(srv.port(), "GET", "/v1/models", "", h).headers["www-authenticate"], "Bearer");
  }
  EXPECT_EQ(http(srv.port(), "GET", "/v1/models", "", good).status, 200);
  EXPECT_EQ(post_json(srv.port(), "/v1/chat/completions", chat("Hi"), good).status, 200);
  EXPECT_EQ(post_json(srv.port(), "/v1/completions", completion, good).status, 200);
  EXPECT_EQ(http(srv.port(), "GET", "/metrics", "", good).status, 200);
  // Open: health, and the page (it asks for the key itself).
  EXPECT_EQ(http(srv.port(), "GET", "/health").status, 200);
  EXPECT_EQ(http(srv.port(), "GET", "/").status, 200);
  EXPECT_EQ(srv.terminate(), 0);
}

TEST(Robustness, BadRequestsGetErrorObjectsAndTheServerGoesOn) {
  REQUIRE_KJV();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2"});
  DF_REQUIRE_SERVER(srv);
  struct Case {
    const char* path;
    std::string body;
    const char* param;
  };
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  const std::vector<Case> cases = {
      {"/v1/chat/completions", "{\"messages\": [", ""},
      {"/v1/chat/completions", "", ""},
      {"/v1/chat/completions", "[1, 2]", ""},
      {"/v1/chat/completions", "{\"messages\": " + deep + "}", ""},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}", ""},
      {"/v1/chat/completions", R"({})", "messages"},
      {"/v1/chat/completions", R"({"messages": "hello"})", "messages"},
      {"/v1/chat/completions", R"({"messages": []})", "messages"},
      {"/v1/chat/completions", R"({"messages": [1]})", "messages[0]"},
      {"/v1/chat/completions", R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "hi"}]})", "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": 7, "content": "hi"}]})", "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 42}]})", "messages[0].content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
       "messages[0].content[0].type"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"})",
       "temperature"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "temperature": -1})", "temperature"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0})", "max_tokens"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": "9"})", "max_tokens"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2.5})", "max_tokens"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "top_p": 2})", "top_p"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "top_k": -3})", "top_k"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "repeat_penalty": 0})",
       "repeat_penalty"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "seed": "x"})", "seed"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"})", "stream"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "stop": 5})", "stop"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "stop": [""]})", "stop"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "n": 2})", "n"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "ignore_eos": 1})", "ignore_eos"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true,
          "top_logprobs": 21})", "top_logprobs"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})",
       "top_logprobs"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})",
       "tools"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "frequency_penalty": 1})",
       "frequency_penalty"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "model": 3})", "model"},
      {"/v1/completions", R"({})", "prompt"},
      {"/v1/completions", R"({"prompt": 12})", "prompt"},
      {"/v1/completions", R"({"prompt": [1, -1]})", "prompt"},
      {"/v1/completions", R"({"prompt": [1, 99999999]})", "prompt"},
      {"/v1/completions", R"({"prompt": ["a", "b"]})", "prompt"},
      {"/v1/completions", R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {"/v1/completions", R"({"prompt": "x", "echo": true})", "echo"},
  };
  for (const Case& c : cases) {
    const HttpResponse r = http(srv.port(), "POST", c.path, c.body);
    expect_error(r, 400, "invalid_request_error", c.param, c.body.substr(0, 100));
  }
  expect_error(http(srv.port(), "GET", "/v1/nothing"), 404, "invalid_request_error", "", "unknown route");
  expect_error(http(srv.port(), "GET", "/v1/chat/completions"), 404, "invalid_request_error", "", "wrong method");
  // Still serving.
  const HttpResponse ok = post_json(srv.port(), "/v1/chat/completions", chat("Who made the heaven?"));
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(srv.terminate(), 0);
}

TEST(Robustness, PromptsAndMaxTokensBeyondTheContextAreRefused) {
  REQUIRE_KJV();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "-c", "64"});
  DF_REQUIRE_SERVER(srv);
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "and the earth ";
  const HttpResponse big = post_json(srv.port(), "/v1/chat/completions", chat(long_text));
  expect_error(big, 400, "invalid_request_error", "messages");
  EXPECT_EQ(big.json()["error"]["code"], "context_length_exceeded");
  const HttpResponse bigc = post_json(srv.port(), "/v1/completions", {{"prompt", long_text}});
  expect_error(bigc, 400, "invalid_request_error", "prompt");
  const HttpResponse much = post_json(srv.port(), "/v1/chat/completions", chat("Hi", 100));
  expect_error(much, 400, "invalid_request_error", "max_tokens");
  EXPECT_EQ(much.json()["error"]["code"], "context_length_exceeded");
  // Without max_tokens a reply ends when the context is full.
  const HttpResponse full = post_json(srv.port(), "/v1/completions", {{"prompt", "And"}, {"ignore_eos", true}});
  ASSERT_EQ(full.status, 200) << full.body;
  EXPECT_EQ(full.json()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(full.json()["usage"]["total_tokens"].get<int>(), 65);  // 64 positions, and the last token sampled
  EXPECT_EQ(srv.terminate(), 0);
}

TEST(Robustness, BodiesOverTheLimitAreRefused) {
  REQUIRE_KJV();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "--max-body", "64K"});
  DF_REQUIRE_SERVER(srv);
  const std::string big = "{\"prompt\": \"" + std::string(200 << 10, 'a') + "\"}";
  const HttpResponse r = http(srv.port(), "POST", "/v1/completions", big);
  expect_error(r, 413, "invalid_request_error");
  EXPECT_EQ(r.json()["error"]["code"], "request_too_large");
  // A chunked body has no length to refuse up front: it is read up to the limit, then refused.
  {
    Socket s(srv.port());
    ASSERT_TRUE(s.ok());
    std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                      "Content-Type: application/json\r\n\r\n";
    const std::string piece(16 << 10, 'b');
    for (int i = 0; i < 12; ++i) {
      char size[16];
      std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
      req += size + piece + "\r\n";
    }
    req += "0\r\n\r\n";
    s.send_all(req);  // the server may stop reading before the end: a short write is fine
    std::string buf;
    HttpResponse cr;
    ASSERT_TRUE(read_head(s, buf, cr));
    read_body(s, buf, cr);
    expect_error(cr, 413, "invalid_request_error");
  }
  EXPECT_EQ(post_json(srv.port(), "/v1/completions", {{"prompt", "And"}, {"max_tokens", 2}}).status, 200);
  EXPECT_EQ(srv.terminate(), 0);
}

// Clients sending their request a byte at a time hold a connection only until --timeout, never the server: with
// fewer connection threads than such clients, another client is still answered.
TEST(Robustness, SlowHeadersAreCutOffAndOthersAreServed) {
  REQUIRE_KJV();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "--timeout", "1", "--http-threads", "2"});
  DF_REQUIRE_SERVER(srv);
  const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                              "application/json\r\nX-Padding: " + std::string(200, 'p') + "\r\nContent-Length: 20\r\n\r\n";
  constexpr int kSlow = 6;
  std::vector<std::thread> slow;
  std::vector<size_t> sent(kSlow, 0);
  std::vector<bool> cut(kSlow, false);
  for (int i = 0; i < kSlow; ++i)
    slow.emplace_back([&, i] {
      Socket s(srv.port());
      if (!s.ok()) return;
      for (char c : request) {
        if (!s.send_all(std::string(1, c))) break;
        ++sent[size_t(i)];
        // Waiting up to 100 ms for the server to hang up is the pause between bytes.
        if (s.closed_by_peer(100)) {
          cut[size_t(i)] = true;
          break;
        }
      }
    });
  // With every connection thread held by a slow client, this waits for the timeout to free one.
  const HttpResponse health = http(srv.port(), "GET", "/health");
  EXPECT_EQ(health.status, 200) << health.body;
  for (auto& t : slow) t.join();
  for (int i = 0; i < kSlow; ++i) {
    EXPECT_TRUE(cut[size_t(i)]) << "slow client " << i << " sent " << sent[size_t(i)] << " bytes";
    EXPECT_LT(sent[size_t(i)], request.size()) << "slow client " << i;
  }
  EXPECT_EQ(post_json(srv.port(), "/v1/completions", {{"prompt", "And"}, {"max_tokens", 2}}).status, 200);
  EXPECT_EQ(srv.terminate(), 0);
}

// A client that goes away mid-reply frees its slot at once: with one slot, the next request is served long before
// the first one's 1,500 tokens could have been generated.
TEST(Robustness, AClientThatGoesAwayMidStreamFreesItsSlot) {
  REQUIRE_KJV();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "--parallel", "1"});
  DF_REQUIRE_SERVER(srv);
  json body = chat("Tell me of the kings of Israel.", 1500);
  body["ignore_eos"] = true;
  body["stream"] = true;
  int seen = 0;
  const Stream s = post_stream(srv.port(), "/v1/chat/completions", body, [&](const std::string&) { return ++seen < 4; });
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(seen, 4);
  // The one slot is still generating for the client that left, or free: this request waits for it either way.
  const HttpResponse next = post_json(srv.port(), "/v1/chat/completions", chat("Who made the heaven?", 8));
  ASSERT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(next.json()["usage"]["completion_tokens"], 8);
  EXPECT_EQ(metric(srv.port(), "diskformer_generations_cancelled_total"), 1u);
  EXPECT_LT(metric(srv.port(), "diskformer_generated_tokens_total"), 1500u);
  EXPECT_EQ(metric(srv.port(), "diskformer_slots_busy"), 0u);
  EXPECT_EQ(srv.terminate(), 0);
}

// A client of a whole (unstreamed) reply that hangs up is noticed while its reply is generated.
TEST(Robustness, AClientThatHangsUpBeforeAWholeReplyFreesItsSlot) {
  REQUIRE_KJV();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "--parallel", "1"});
  DF_REQUIRE_SERVER(srv);
  json whole = chat("And of Judah?", 1500);
  whole["ignore_eos"] = true;
  {
    Socket sock(srv.port());
    ASSERT_TRUE(sock.ok());
    ASSERT_TRUE(sock.send_all(request_text("POST", "/v1/chat/completions", whole.dump(), {})));
  }
  EXPECT_EQ(metric_reaching(srv.port(), "diskformer_generations_cancelled_total", 1), 1u);
  EXPECT_LT(metric(srv.port(), "diskformer_generated_tokens_total"), 1500u);
  const HttpResponse next = post_json(srv.port(), "/v1/chat/completions", chat("Who made the heaven?", 8));
  ASSERT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(srv.terminate(), 0);
}

// Hundreds of refused requests with large bodies leave the server's memory where it was.
TEST(Robustness, MemoryStaysBoundedUnderBadRequests) {
  REQUIRE_KJV();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "--max-body", "1M", "--http-threads", "4"});
  DF_REQUIRE_SERVER(srv);
  // Warm up: every thread has served a large request once.
  const std::string junk = "{\"messages\": \"" + std::string(900 << 10, 'x');  // unterminated: a parse error
  for (int i = 0; i < 8; ++i) http(srv.port(), "POST", "/v1/chat/completions", junk);
  const uint64_t before = srv.rss_bytes();
  ASSERT_GT(before, 0u);
  const std::string over = std::string((1 << 20) + (200 << 10), 'y');
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        EXPECT_EQ(http(srv.port(), "POST", "/v1/chat/completions", junk).status, 400);
        if (i % 10 == 0) {
          EXPECT_EQ(http(srv.port(), "POST", "/v1/completions", over).status, 413);
        }
      }
    });
  for (auto& t : clients) t.join();
  const uint64_t after = srv.rss_bytes();
  // 200 bodies of 0.9 MiB went through; a leak of each would be 180 MiB.
  EXPECT_LT(after, before + (48u << 20)) << "RSS " << before << " -> " << after;
  EXPECT_EQ(post_json(srv.port(), "/v1/completions", {{"prompt", "And"}, {"max_tokens", 2}}).status, 200);
  EXPECT_EQ(srv.terminate(), 0);
}

// Replies streamed to the end and replies whose clients hang up mid-stream leave the server's memory where it was:
// a job, its events or a connection kept after its end would grow it with every request.
TEST(Robustness, MemoryStaysBoundedAcrossStreamsAndHangups) {
  REQUIRE_KJV();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "--parallel", "2", "--http-threads", "4"});
  DF_REQUIRE_SERVER(srv);
  json body = chat("Tell me of the kings of Israel.", 48);
  body["ignore_eos"] = true;
  body["stream"] = true;
  auto round = [&](int requests) {
    std::vector<std::thread> clients;
    for (int c = 0; c < 4; ++c)
      clients.emplace_back([&, c] {
        for (int i = 0; i < requests; ++i) {
          int seen = 0;
          const bool leave = (i + c) % 2 == 0;  // half the clients go away after their third event
          const Stream s = post_stream(srv.port(), "/v1/chat/completions", body,
                                       [&](const std::string&) { return !leave || ++seen < 3; });
          EXPECT_EQ(s.status, 200);
        }
      });
    for (auto& t : clients) t.join();
  };
  round(4);  // every thread and slot has served and lost a client once
  const uint64_t before = srv.rss_bytes();
  ASSERT_GT(before, 0u);
  round(40);
  // 160 replies of 48 tokens, 80 of them abandoned: what each kept would add up.
  EXPECT_EQ(metric_reaching(srv.port(), "diskformer_slots_busy", 0), 0u);
  const uint64_t after = srv.rss_bytes();
  EXPECT_LT(after, before + (16u << 20)) << "RSS " << before << " -> " << after;
  EXPECT_GE(metric(srv.port(), "diskformer_generations_cancelled_total"), 1u);
  EXPECT_EQ(srv.terminate(), 0);
}

}  // namespace
}  // namespace df::test
