// The API as a client sees it: greedy replies byte for byte what `run` prints (the shared gold models, resident and
// streamed from disk), streamed replies equal to whole ones, log-probabilities equal to run --n-probs and to the
// engine's own logits, seeded sampling, stop strings, prefix reuse, models, health and the row cache's metrics.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "diskformer/engine/model.h"
#include "diskformer/engine/session.h"
#include "diskformer/tokenizer/tokenizer.h"
#include "model/gold.h"
#include "server/http_client.h"
#include "server/serve_process.h"
#include "store/store_test_util.h"
#include "support/sessions.h"
#include "support/tiny_model.h"

namespace df::test {
namespace {

using json = nlohmann::json;

// What JSON can carry of bytes a model printed: bytes that are not UTF-8 become U+FFFD, as the server writes them.
std::string as_json_text(const std::string& bytes) {
  return json::parse(json(bytes).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

struct CliOutput {
  int code = -1;
  std::string out, err, probs;
};

// `diskformer run` with these arguments (a prompt file instead of -p, so that any bytes pass).
CliOutput run_cli_prompt(const std::string& prompt, std::vector<std::string> args, bool probs = false) {
  const auto dir = temp_dir("run");
  std::ofstream(dir / "prompt.txt", std::ios::binary) << prompt;
  args.insert(args.begin(), {"run", "-f", (dir / "prompt.txt").string()});
  if (probs) {
    args.push_back("--probs-file");
    args.push_back((dir / "probs.jsonl").string());
  }
  const auto r = df::test::run_cli(args, dir);
  return {r.code, r.out, r.err, probs ? slurp(dir / "probs.jsonl") : ""};
}

std::string content_of(const HttpResponse& r, bool chat) {
  const json j = r.json();
  if (!j.is_object() || !j.contains("choices")) return "<no reply: " + r.body + ">";
  return chat ? j["choices"][0]["message"]["content"].get<std::string>() : j["choices"][0]["text"].get<std::string>();
}

// The exact bytes of a chat reply, from its logprobs' bytes.
std::string bytes_of(const json& content) {
  std::string s;
  for (const auto& e : content)
    for (const auto& b : e["bytes"]) s.push_back(char(b.get<int>()));
  return s;
}

// The first n bytes of s, cut back to a character boundary.
std::string utf8_prefix(const std::string& s, size_t n) {
  if (n >= s.size()) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

std::string chatml(const std::string& user) { return "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"; }

class GoldServe : public ::testing::TestWithParam<const char*> {};

// Every gold prompt through /v1/completions and through /v1/chat/completions (its ChatML rendering) against run.
TEST_P(GoldServe, GreedyRepliesAreWhatRunPrints) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q4_0.gguf");
  DF_REQUIRE_SHARED(gold, "models/qwen3moe-q4_0.gold.json");
  std::vector<std::string> budget;
  if (std::string(GetParam()) == "streamed") {
    // The KV caches and work buffers of both slots, and 40 of the 64 expert records.
    auto probe = engine::Model::open(model.string(),
                                     {.n_ctx = 512, .threads = 1, .ram_budget = uint64_t(1) << 30, .sessions = 2});
    ASSERT_TRUE(probe.ok()) << probe.error().message;
    const engine::WeightPlan& p = (*probe)->plan();
    budget = {"--ram-budget", std::to_string(p.fixed_bytes() + 40 * p.slot_bytes)};
  }
  std::vector<std::string> args = {"-m", model.string(), "-c", "512", "-t", "2", "--parallel", "2"};
  args.insert(args.end(), budget.begin(), budget.end());
  ServeProcess srv(args);
  DF_REQUIRE_SERVER(srv);
  std::vector<std::string> run_args = {"-m", model.string(), "-c", "512", "-t", "2", "-n", "24", "--temp", "0",
                                       "--ignore-eos"};
  run_args.insert(run_args.end(), budget.begin(), budget.end());

  const json g = json::parse(slurp(gold));
  for (const auto& c : g["cases"]) {
    const std::string prompt = c["prompt"];
    const CliOutput ran = run_cli_prompt(prompt, run_args);
    ASSERT_EQ(ran.code, 0) << ran.err;
    const HttpResponse r = post_json(srv.port(), "/v1/completions",
                                     {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(content_of(r, false), as_json_text(ran.out)) << prompt;
    EXPECT_EQ(r.json()["usage"]["completion_tokens"], 24);

    // Chat: the template's rendering, run on the same text, byte for byte through the logprobs' bytes.
    const std::string user = utf8_prefix(prompt, 40);
    const CliOutput chat_ran = run_cli_prompt(chatml(user), run_args);
    ASSERT_EQ(chat_ran.code, 0) << chat_ran.err;
    const HttpResponse rc = post_json(srv.port(), "/v1/chat/completions",
                                      {{"messages", {{{"role", "user"}, {"content", user}}}},
                                       {"max_tokens", 24},
                                       {"temperature", 0},
                                       {"ignore_eos", true},
                                       {"logprobs", true}});
    ASSERT_EQ(rc.status, 200) << rc.body;
    EXPECT_EQ(bytes_of(rc.json()["choices"][0]["logprobs"]["content"]), chat_ran.out) << user;
    EXPECT_EQ(content_of(rc, true), as_json_text(chat_ran.out)) << user;
  }
  if (!budget.empty()) {
    const HttpResponse m = http(srv.port(), "GET", "/metrics");
    EXPECT_NE(m.body.find("diskformer_expert_cache_hit_ratio{tier=\"ram\"}"), std::string::npos) << m.body;
  }
  EXPECT_EQ(srv.terminate(), 0) << srv.err();
}

INSTANTIATE_TEST_SUITE_P(Budgets, GoldServe, ::testing::Values("resident", "streamed"),
                         [](const auto& info) { return std::string(info.param); });

// The families whose slots hold more than a KV cache (qwen35moe's recurrent DeltaNet state; gemma4's per-layer
// embeddings and shared KV layers), two requests at a time: each reply is run's, and so is a prompt that extends the
// one a slot has just evaluated (its cached prefix, a state copy for the hybrid model, is reused).
class FamilyServe : public ::testing::TestWithParam<const char*> {};

TEST_P(FamilyServe, ConcurrentRepliesAndReusedPrefixesAreWhatRunPrints) {
  DF_REQUIRE_SHARED(model, std::string("models/") + GetParam() + ".gguf");
  DF_REQUIRE_SHARED(gold, std::string("models/") + GetParam() + ".gold.json");
  ServeProcess srv({"-m", model.string(), "-c", "512", "-t", "2", "--parallel", "2"});
  DF_REQUIRE_SERVER(srv);
  const std::vector<std::string> run_args = {"-m", model.string(), "-c", "512", "-t", "2", "-n", "16", "--temp", "0",
                                             "--ignore-eos"};
  auto complete = [&](const std::string& prompt) {
    return post_json(srv.port(), "/v1/completions",
                     {{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true}});
  };
  const json g = json::parse(slurp(gold));
  std::vector<std::string> prompts;
  for (const auto& c : g["cases"]) prompts.push_back(c["prompt"]);
  for (size_t i = 0; i + 1 < prompts.size(); i += 2) {
    HttpResponse second;
    std::thread other([&] { second = complete(prompts[i + 1]); });
    const HttpResponse first = complete(prompts[i]);
    other.join();
    for (const auto& [prompt, r] : {std::pair{prompts[i], first}, std::pair{prompts[i + 1], second}}) {
      const CliOutput ran = run_cli_prompt(prompt, run_args);
      ASSERT_EQ(ran.code, 0) << ran.err;
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(content_of(r, false), as_json_text(ran.out)) << prompt;
    }
  }
  // The first prompt and its reply, and more: the slot that served it keeps that prefix.
  const std::string longer = prompts[0] + content_of(complete(prompts[0]), false) + " and then";
  const CliOutput ran = run_cli_prompt(longer, run_args);
  ASSERT_EQ(ran.code, 0) << ran.err;
  const HttpResponse r = complete(longer);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_GT(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << r.body;
  EXPECT_EQ(content_of(r, false), as_json_text(ran.out)) << longer;
  EXPECT_EQ(srv.terminate(), 0);
}

INSTANTIATE_TEST_SUITE_P(Shared, FamilyServe, ::testing::Values("qwen35moe-q8_0", "gemma4-e2b-q8_0", "gemma4-moe-q8_0"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// A model whose per-layer embedding table streams (gemma4 E2B under its smallest RAM budget): /metrics reports the
// row cache's lookups and hit rate beside the other counters.
TEST(Api, MetricsReportTheRowCache) {
  DF_REQUIRE_SHARED(model, "models/gemma4-e2b-q8_0.gguf");
  auto probe = engine::Model::open(model.string(), {.n_ctx = 256, .threads = 1, .ram_budget = uint64_t(64) << 20});
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  const std::string budget = std::to_string((*probe)->plan().min_budget());  // the table through its fewest rows
  ServeProcess srv({"-m", model.string(), "-c", "256", "-t", "2", "--ram-budget", budget});
  DF_REQUIRE_SERVER(srv);
  const HttpResponse r = post_json(srv.port(), "/v1/completions", {{"prompt", "Hello world"}, {"max_tokens", 4}});
  ASSERT_EQ(r.status, 200) << r.body;
  // The engine's counters reach /metrics in the scheduler's next snapshot.
  const std::string none = "diskformer_row_cache_lookups_total{tier=\"ram\"} 0\n";
  std::string m = http(srv.port(), "GET", "/metrics").body;
  for (int i = 0; i < 100 && m.find(none) != std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    m = http(srv.port(), "GET", "/metrics").body;
  }
  for (const char* name : {"# TYPE diskformer_row_cache_hit_ratio gauge", "diskformer_row_cache_hit_ratio{tier=\"ram\"} ",
                           "diskformer_row_cache_lookups_total{tier=\"ram\"} "})
    EXPECT_NE(m.find(name), std::string::npos) << name << "\n" << m;
  EXPECT_EQ(m.find(none), std::string::npos) << m;
  EXPECT_EQ(srv.terminate(), 0) << srv.err();
}

TEST(Api, StreamedRepliesEqualWholeOnes) {
  if (!std::filesystem::exists(kjv_model())) GTEST_SKIP() << "missing " << kjv_model();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2"});
  DF_REQUIRE_SERVER(srv);
  for (const bool chat : {true, false}) {
    json body = {{"max_tokens", 20}, {"temperature", 0}};
    if (chat) {
      body["messages"] = {{{"role", "system"}, {"content", "Speak as the scriptures."}},
                          {{"role", "user"}, {"content", "Who made the heaven?"}}};
    } else {
      body["prompt"] = "And God said";
    }
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    const HttpResponse whole = post_json(srv.port(), path, body);
    ASSERT_EQ(whole.status, 200) << whole.body;
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    const Stream s = post_stream(srv.port(), path, body);
    ASSERT_EQ(s.status, 200);
    ASSERT_GE(s.events.size(), 4u) << s.body;
    EXPECT_EQ(s.events.back(), "[DONE]");
    std::string text;
    std::string finish;
    json usage;
    for (size_t i = 0; i + 1 < s.events.size(); ++i) {
      const json e = json::parse(s.events[i]);
      EXPECT_EQ(e["object"], chat ? "chat.completion.chunk" : "text_completion");
      EXPECT_EQ(e["id"], s.events.size() > 1 ? json::parse(s.events[0])["id"] : json());
      if (e.contains("usage")) usage = e["usage"];
      if (e["choices"].empty()) continue;
      const json& c = e["choices"][0];
      if (chat && i == 0) {
        EXPECT_EQ(c["delta"]["role"], "assistant");
      }
      if (chat && c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
      if (!chat) text += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
    EXPECT_EQ(text, content_of(whole, chat));
    EXPECT_EQ(finish, "length");
    // The same counts; the streamed request may reuse the whole one's cached prompt (all but its last batch of
    // whole Q4_K groups, here), which a reply never shows.
    for (const char* key : {"completion_tokens", "prompt_tokens", "total_tokens"}) {
      EXPECT_EQ(usage[key], whole.json()["usage"][key]) << key;
    }
  }
  EXPECT_EQ(srv.terminate(), 0);
}

// The server's top_logprobs, run --n-probs and a log-softmax of the engine's logits computed here all agree.
TEST(Api, LogprobsAgreeWithRunAndWithTheEnginesLogits) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q4_0.gguf");
  const std::string prompt = "Once upon a time, in a land far away,";
  ServeProcess srv({"-m", model.string(), "-c", "256", "-t", "2"});
  DF_REQUIRE_SERVER(srv);
  const HttpResponse r = post_json(srv.port(), "/v1/chat/completions",
                                   {{"messages", {{{"role", "user"}, {"content", prompt}}}},
                                    {"max_tokens", 12},
                                    {"temperature", 0},
                                    {"ignore_eos", true},
                                    {"logprobs", true},
                                    {"top_logprobs", 5}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json content = r.json()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 12u);

  const CliOutput ran = run_cli_prompt(chatml(prompt), {"-m", model.string(), "-c", "256", "-t", "2", "-n", "12", "--temp",
                                                  "0", "--ignore-eos", "--n-probs", "5"},
                                 true);
  ASSERT_EQ(ran.code, 0) << ran.err;
  std::istringstream lines(ran.probs);
  std::string line;
  size_t i = 0;
  for (; std::getline(lines, line); ++i) {
    ASSERT_LT(i, content.size());
    EXPECT_EQ(json::parse(line), content[i]) << "token " << i;
  }
  EXPECT_EQ(i, content.size());

  // The engine's logits, step by step, on the ids the template and tokenizer make of the conversation.
  auto m = engine::Model::open(model.string(), {.n_ctx = 256, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  auto tok = tokenizer::Tokenizer::from_gguf((*m)->file());
  ASSERT_TRUE(tok.ok());
  const std::vector<int32_t> ids = tok->encode(chatml(prompt), {.parse_special = true});
  engine::Session s = new_session(**m);
  ASSERT_TRUE(s.eval(ids).ok());
  for (const auto& e : content) {
    const std::span<const float> logits = s.logits();
    long double mx = -INFINITY, sum = 0;
    for (float l : logits) mx = std::max<long double>(mx, l);
    for (float l : logits) sum += std::exp((long double)l - mx);
    const long double lse = mx + std::log(sum);
    const int32_t id = e["id"];
    EXPECT_NEAR(double(e["logprob"].get<double>()), double((long double)logits[size_t(id)] - lse), 1e-5);
    // Greedy: the chosen token is the first of the top list, and the list is in descending order of the logits.
    ASSERT_EQ(e["top_logprobs"].size(), 5u);
    EXPECT_EQ(e["top_logprobs"][0]["id"], id);
    for (size_t k = 0; k < 5; ++k) {
      const int32_t tk = e["top_logprobs"][k]["id"];
      EXPECT_NEAR(e["top_logprobs"][k]["logprob"].get<double>(), double((long double)logits[size_t(tk)] - lse), 1e-5);
      if (k > 0) {
        EXPECT_GE(logits[size_t(e["top_logprobs"][k - 1]["id"].get<int32_t>())], logits[size_t(tk)]);
      }
    }
    size_t above = 0;  // no token outside the list beats its last entry
    const float last = logits[size_t(e["top_logprobs"][4]["id"].get<int32_t>())];
    for (float l : logits) above += l > last;
    EXPECT_LE(above, 4u);
    ASSERT_TRUE(s.eval(std::span<const int32_t>(&id, 1)).ok());
  }

  // /v1/completions gives the legacy shape.
  const HttpResponse c = post_json(srv.port(), "/v1/completions",
                                   {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 3}});
  ASSERT_EQ(c.status, 200) << c.body;
  const json lp = c.json()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 4u);
  EXPECT_EQ(lp["token_logprobs"].size(), 4u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 3u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(srv.terminate(), 0);
}

TEST(Api, SeededSamplingIsReproducibleAndEqualsRun) {
  if (!std::filesystem::exists(kjv_model())) GTEST_SKIP() << "missing " << kjv_model();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2"});
  DF_REQUIRE_SERVER(srv);
  const json body = {{"prompt", "And the LORD said"}, {"max_tokens", 24}, {"temperature", 0.9}, {"seed", 42}};
  const HttpResponse a = post_json(srv.port(), "/v1/completions", body);
  const HttpResponse b = post_json(srv.port(), "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(content_of(a, false), content_of(b, false));
  const CliOutput ran = run_cli_prompt("And the LORD said", {"-m", kjv_model().string(), "-t", "2", "-n", "24", "--temp",
                                                       "0.9", "--seed", "42"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  EXPECT_EQ(content_of(a, false), as_json_text(ran.out));
  EXPECT_EQ(srv.terminate(), 0);
}

// Each sampling option the API takes reaches the sampler as run's flag does: with it the seeded reply is run's with
// that flag, and the flag changes run's reply (so a server that dropped it would print the plain one).
TEST(Api, EverySamplingOptionActsAsRunsFlag) {
  if (!std::filesystem::exists(kjv_model())) GTEST_SKIP() << "missing " << kjv_model();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2"});
  DF_REQUIRE_SERVER(srv);
  const std::string prompt = "And the LORD said";
  const std::vector<std::string> base = {"-m", kjv_model().string(), "-t", "2", "-n", "24", "--temp", "1.2", "--seed", "7"};
  const CliOutput plain = run_cli_prompt(prompt, base);
  ASSERT_EQ(plain.code, 0) << plain.err;
  const struct {
    const char* field;
    json value;
    const char* flag;
  } options[] = {{"top_k", 3, "--top-k"},
                 {"top_p", 0.3, "--top-p"},
                 {"min_p", 0.3, "--min-p"},
                 {"repeat_penalty", 3.0, "--repeat-penalty"}};
  for (const auto& o : options) {
    std::vector<std::string> args = base;
    args.push_back(o.flag);
    args.push_back(o.value.dump());
    const CliOutput ran = run_cli_prompt(prompt, args);
    ASSERT_EQ(ran.code, 0) << ran.err;
    ASSERT_NE(ran.out, plain.out) << o.flag << " changes nothing here: the check would prove nothing";
    const HttpResponse r = post_json(srv.port(), "/v1/completions",
                                     {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 1.2}, {"seed", 7},
                                      {o.field, o.value}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(content_of(r, false), as_json_text(ran.out)) << o.field;
  }
  EXPECT_EQ(srv.terminate(), 0);
}

// ignore_eos as run's --ignore-eos (llama.cpp's): end-of-generation tokens are never chosen. The model is made so that
// its first greedy token is its EOS (a tiny model, written again with that token as its EOS): without ignore_eos the
// reply is empty; with it the reply is run's, greedy and sampled, not the EOS printed and gone past.
TEST(Api, IgnoreEosNeverChoosesTheEndOfGeneration) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  const auto dir = temp_dir("serve_ignore_eos");
  const std::string path = (dir / "m.gguf").string();
  const std::string prompt = "The quick brown fox";
  TinyModel spec;
  spec.tokenizer_from = vocab.string();
  ASSERT_TRUE(write_tiny_model(path, spec).ok());
  {
    auto m = engine::Model::open(path, {.n_ctx = 256, .threads = 2});
    ASSERT_TRUE(m.ok()) << m.error().message;
    auto tok = tokenizer::Tokenizer::from_gguf((*m)->file());
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    engine::Session s = new_session(**m);
    spec.eos_id = greedy_ids(s, tok->encode(prompt, {.parse_special = true}), 1)[0];
  }
  ASSERT_TRUE(write_tiny_model(path, spec).ok());

  ServeProcess srv({"-m", path, "-t", "2", "-c", "256"});
  DF_REQUIRE_SERVER(srv);
  const HttpResponse stops =
      post_json(srv.port(), "/v1/completions", {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(stops.status, 200) << stops.body;
  EXPECT_EQ(content_of(stops, false), "");
  EXPECT_EQ(stops.json()["choices"][0]["finish_reason"], "stop");
  for (const double temp : {0.0, 1.5}) {
    const CliOutput ran = run_cli_prompt(prompt, {"-m", path, "-t", "2", "-c", "256", "-n", "12", "--temp",
                                                  std::to_string(temp), "--seed", "3", "--ignore-eos"});
    ASSERT_EQ(ran.code, 0) << ran.err;
    ASSERT_FALSE(ran.out.empty());
    const HttpResponse r = post_json(srv.port(), "/v1/completions",
                                     {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", temp}, {"seed", 3},
                                      {"ignore_eos", true}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(content_of(r, false), as_json_text(ran.out)) << "temperature " << temp;
    EXPECT_EQ(r.json()["usage"]["completion_tokens"], 12);
  }
  EXPECT_EQ(srv.terminate(), 0);
}

// A prompt of several batches is evaluated a batch a turn of the server's loop, between the decode steps of the
// other slots (here a streamed reply that starts meanwhile): both replies are run's.
TEST(Api, APromptOfSeveralBatchesBesideAStreamedReply) {
  if (!std::filesystem::exists(kjv_model())) GTEST_SKIP() << "missing " << kjv_model();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "-c", "2048", "--parallel", "2"});
  DF_REQUIRE_SERVER(srv);
  std::string long_prompt;
  for (int i = 0; i < 100; ++i) long_prompt += "And God said, Let there be light: and there was light. ";
  const std::string short_prompt = "In the beginning";
  const std::vector<std::string> run_args = {"-m", kjv_model().string(), "-t", "2", "-c", "2048", "--temp", "0",
                                             "--ignore-eos"};
  auto with_n = [&](const char* n) {
    std::vector<std::string> a = run_args;
    a.insert(a.end(), {"-n", n});
    return a;
  };
  const CliOutput long_ran = run_cli_prompt(long_prompt, with_n("16"));
  const CliOutput short_ran = run_cli_prompt(short_prompt, with_n("64"));
  ASSERT_EQ(long_ran.code, 0) << long_ran.err;
  ASSERT_EQ(short_ran.code, 0) << short_ran.err;

  HttpResponse long_reply;
  std::thread long_client([&] {
    long_reply = post_json(srv.port(), "/v1/completions",
                           {{"prompt", long_prompt}, {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true}});
  });
  const Stream streamed = post_stream(srv.port(), "/v1/completions",
                                      {{"prompt", short_prompt}, {"max_tokens", 64}, {"temperature", 0},
                                       {"ignore_eos", true}, {"stream", true}});
  long_client.join();
  ASSERT_EQ(long_reply.status, 200) << long_reply.body;
  EXPECT_GT(long_reply.json()["usage"]["prompt_tokens"].get<int>(), 2 * 512);  // three batches or more
  EXPECT_EQ(content_of(long_reply, false), as_json_text(long_ran.out));
  std::string text;
  for (const auto& e : streamed.events)
    if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, as_json_text(short_ran.out));
  EXPECT_EQ(srv.terminate(), 0);
}

TEST(Api, StopStringsEndTheReplyBeforeThem) {
  if (!std::filesystem::exists(kjv_model())) GTEST_SKIP() << "missing " << kjv_model();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2"});
  DF_REQUIRE_SERVER(srv);
  const json body = {{"prompt", "In the beginning"}, {"max_tokens", 30}, {"temperature", 0}};
  const std::string full = content_of(post_json(srv.port(), "/v1/completions", body), false);
  ASSERT_GT(full.size(), 10u) << full;
  // A stop string from the middle of the greedy reply.
  const std::string stop = full.substr(full.size() / 2, 4);
  const std::string expected = full.substr(0, full.find(stop));
  json stopped = body;
  stopped["stop"] = {"\u00a7never", stop};
  const HttpResponse r = post_json(srv.port(), "/v1/completions", stopped);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(content_of(r, false), expected);
  EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "stop");
  // Streamed, no part of the stop string is ever sent.
  stopped["stream"] = true;
  const Stream s = post_stream(srv.port(), "/v1/completions", stopped);
  std::string text;
  for (const auto& e : s.events)
    if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, expected);
  EXPECT_EQ(srv.terminate(), 0);
}

TEST(Api, AConversationReusesItsCachedPrefixAndTheReplyIsUnchanged) {
  if (!std::filesystem::exists(kjv_model())) GTEST_SKIP() << "missing " << kjv_model();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2"});
  DF_REQUIRE_SERVER(srv);
  // A system message long enough that the first turn's batch (64 tokens and more) takes the tiled attention, as the
  // second turn's fresh batch does: its positions are kept where their orders agree.
  std::string system = "You are a reader of the King James Bible.";
  for (int i = 0; i < 6; ++i) system += " Answer in the words of the scriptures, plainly, verse by verse.";
  json messages = {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "Who made the heaven?"}}};
  const HttpResponse first = post_json(srv.port(), "/v1/chat/completions",
                                       {{"messages", messages}, {"max_tokens", 16}, {"temperature", 0}});
  ASSERT_EQ(first.status, 200) << first.body;
  ASSERT_GE(first.json()["usage"]["prompt_tokens"].get<int>(), 64);
  messages.push_back({{"role", "assistant"}, {"content", content_of(first, true)}});
  messages.push_back({{"role", "user"}, {"content", "And the earth?"}});
  const json second_body = {{"messages", messages}, {"max_tokens", 16}, {"temperature", 0}};
  const HttpResponse second = post_json(srv.port(), "/v1/chat/completions", second_body);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_GE(second.json()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 64) << second.body;
  // The same request on a fresh server (nothing cached) gives the same reply.
  ServeProcess fresh({"-m", kjv_model().string(), "-t", "2"});
  DF_REQUIRE_SERVER(fresh);
  const HttpResponse again = post_json(fresh.port(), "/v1/chat/completions", second_body);
  EXPECT_EQ(again.json()["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(content_of(again, true), content_of(second, true));
  const HttpResponse m = http(srv.port(), "GET", "/metrics");
  EXPECT_NE(m.body.find("diskformer_prompt_tokens_cached_total "), std::string::npos);
  EXPECT_EQ(srv.terminate(), 0);
  EXPECT_EQ(fresh.terminate(), 0);
}

TEST(Api, ModelsHealthMetricsAndThePage) {
  if (!std::filesystem::exists(kjv_model())) GTEST_SKIP() << "missing " << kjv_model();
  ServeProcess srv({"-m", kjv_model().string(), "-t", "2", "--alias", "kjv", "--parallel", "3"});
  DF_REQUIRE_SERVER(srv);
  const HttpResponse models = http(srv.port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json()["object"], "list");
  EXPECT_EQ(models.json()["data"][0]["id"], "kjv");
  EXPECT_EQ(models.json()["data"][0]["meta"]["slots"], 3);
  const HttpResponse health = http(srv.port(), "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json()["status"], "ok");
  EXPECT_EQ(health.json()["slots_idle"], 3);
  const HttpResponse reply = post_json(srv.port(), "/v1/completions", {{"prompt", "And"}, {"max_tokens", 5}});
  EXPECT_EQ(reply.json()["model"], "kjv");
  const HttpResponse metrics = http(srv.port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.headers.at("content-type").rfind("text/plain", 0), 0u);
  for (const char* name :
       {"diskformer_requests_total{route=\"/v1/completions\",status=\"200\"} 1", "diskformer_generated_tokens_total 5",
        "diskformer_slots 3", "diskformer_requests_queued 0", "diskformer_decode_tokens_per_second ",
        "diskformer_ram_used_bytes ", "diskformer_disk_read_bytes_total ", "diskformer_pcie_copied_bytes_total 0",
        "# TYPE diskformer_generated_tokens_total counter"})
    EXPECT_NE(metrics.body.find(name), std::string::npos) << name << "\n" << metrics.body;
  const HttpResponse page = http(srv.port(), "GET", "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<script src=\"/chat.js\""), std::string::npos);
  EXPECT_EQ(page.headers.at("content-type").rfind("text/html", 0), 0u);
  EXPECT_NE(page.headers.at("content-security-policy").find("default-src 'self'"), std::string::npos);
  EXPECT_EQ(http(srv.port(), "GET", "/chat.js").status, 200);
  EXPECT_EQ(http(srv.port(), "GET", "/chat.css").status, 200);
  EXPECT_EQ(srv.terminate(), 0);
}

}  // namespace
}  // namespace df::test
