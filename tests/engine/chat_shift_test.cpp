// chat at a full context: the oldest turns are dropped, the system message stays, stderr says so and the chat goes
// on; a message longer than the whole context is left out with a note. A dropped turn leaves a conversation that a
// fresh chat renders alike, so the reply after a shift is what a chat of the shorter conversation would say.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "support/tiny_model.h"
#include "support/cli_run.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::vector<nlohmann::json> stats_of(const std::string& err) {
  std::vector<nlohmann::json> out;
  std::istringstream in(err);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("{\"backend\"", 0) == 0) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(ChatShift, AFullContextDropsTheOldestTurnsAndGoesOn) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  const std::string path = (temp_dir("chat_shift") / "m.gguf").string();
  TinyModel m;
  m.tokenizer_from = vocab.string();
  ASSERT_TRUE(write_tiny_model(path, m).ok());
  const std::string chat = "chat -m " + path + " -c 128 -n 24 --temp 0 --ignore-eos -t 1 --backend cpu --json-stats "
                           "--system 'You answer in verse.'";
  std::string lines;
  for (int i = 0; i < 6; ++i) lines += "Tell me about the number " + std::to_string(i) + ", please.\n";
  std::string long_line;
  for (int i = 0; i < 200; ++i) long_line += "word ";
  lines += long_line + "\nAnd the last one?\n";
  const CliRun r = run_cli_capture(chat, lines);
  EXPECT_EQ(r.status, 0) << r.err;
  // Every message but the one longer than the context has its reply and its stats; no reply hits the context.
  const auto stats = stats_of(r.err);
  ASSERT_EQ(stats.size(), 7u) << r.err;
  for (size_t i = 0; i < stats.size(); ++i) {
    EXPECT_EQ(stats[i]["gen_tokens"], 24) << i;
    EXPECT_LE(stats[i]["n_past"].get<int>(), 128) << i;
    EXPECT_EQ(stats[i]["stop"], "n_predict") << i;
  }
  EXPECT_NE(r.err.find("diskformer chat: the context of 128 tokens is full: dropped the oldest"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the system message kept"), std::string::npos);
  EXPECT_EQ(count(r.err, "more than the context of 128 (-c); it is left out"), 1u) << r.err;

  // The same lines again give the same replies: a shift depends only on the conversation.
  const CliRun again = run_cli_capture(chat, lines);
  EXPECT_EQ(again.out, r.out);
}

// A message that does not fit beside the turn before it drops that turn before anything is generated: the reply is
// then, token for token, what a chat of the system message and this message alone replies, and only what follows
// the system message is evaluated again.
TEST(ChatShift, TheReplyAfterAShiftIsAFreshChatsReply) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  const std::string path = (temp_dir("chat_shift_fresh") / "m.gguf").string();
  TinyModel m;
  m.tokenizer_from = vocab.string();
  ASSERT_TRUE(write_tiny_model(path, m).ok());
  const std::string chat = "chat -m " + path + " -c 128 -n 8 --temp 0 --ignore-eos -t 1 --backend cpu --json-stats "
                           "--system 'Be brief.'";
  std::string first, second;
  for (int i = 0; i < 25; ++i) first += "apple ", second += "pear ";
  const CliRun both = run_cli_capture(chat, first + "\n" + second + "\n");
  const CliRun alone = run_cli_capture(chat, second + "\n");
  ASSERT_EQ(both.status, 0) << both.err;
  ASSERT_EQ(alone.status, 0) << alone.err;
  EXPECT_NE(both.err.find("dropped the oldest 1 turn"), std::string::npos) << both.err;
  ASSERT_GT(alone.out.size(), 1u);
  ASSERT_GT(both.out.size(), alone.out.size());
  EXPECT_EQ(both.out.substr(both.out.size() - alone.out.size()), alone.out);
  const auto a = stats_of(alone.err), b = stats_of(both.err);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1]["n_past"], a[0]["n_past"]);
  EXPECT_LT(b[1]["prompt_tokens"].get<int>(), a[0]["prompt_tokens"].get<int>());  // the system message was kept
}

}  // namespace
}  // namespace df::test
