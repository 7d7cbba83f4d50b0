// --ignore-eos as llama.cpp has it: every end-of-generation token gets a logit of -inf, so that it is never chosen,
// and greedy output differs from printing it and going on exactly where such a token is the best. The models here
// are made so that their first greedy token is their end-of-generation token: a tiny model is written, its first
// greedy token found, and the model written again (same seed, same weights) with that token as its EOS.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "diskformer/engine/generate.h"
#include "diskformer/engine/model.h"
#include "diskformer/sampling/sampler.h"
#include "diskformer/tokenizer/tokenizer.h"
#include "support/tiny_model.h"
#include "support/cli_run.h"
#include "support/sessions.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

using engine::Model;
using engine::Session;

// Greedy tokens by hand: argmax of each step's logits with the banned ids left out.
std::vector<int32_t> greedy_without(Session& s, const std::vector<int32_t>& prompt, int n,
                                    const std::vector<int32_t>& banned) {
  std::vector<int32_t> out;
  EXPECT_TRUE(s.eval(prompt).ok());
  for (int i = 0; i < n; ++i) {
    std::vector<float> l(s.logits().begin(), s.logits().end());
    for (int32_t b : banned) l[size_t(b)] = -INFINITY;
    const int32_t id = sampling::argmax(l);
    out.push_back(id);
    if (i + 1 < n) {
      EXPECT_TRUE(s.eval(std::span<const int32_t>(&id, 1)).ok());
    }
  }
  return out;
}

int32_t first_greedy(Model& m, const std::vector<int32_t>& prompt) {
  Session s = new_session(m);
  EXPECT_TRUE(s.eval(prompt).ok());
  return sampling::argmax(s.logits());
}

TEST(IgnoreEos, GenerateNeverChoosesAnEndOfGenerationToken) {
  const std::string path = (temp_dir("ignore_eos_engine") / "m.gguf").string();
  ASSERT_TRUE(write_tiny_model(path, TinyModel{}).ok());
  auto m = Model::open(path, {.n_ctx = 128, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3};
  const int32_t eos = first_greedy(**m, prompt);  // the model's end of generation, by the hooks
  engine::GenerateHooks hooks;
  std::vector<int32_t> printed;
  hooks.is_eog = [&](int32_t id) { return id == eos; };
  hooks.on_token = [&](int32_t id) { printed.push_back(id); };

  // Without --ignore-eos the first token ends generation and is not printed.
  {
    Session s = new_session(**m);
    std::vector<int32_t> history;
    auto st = engine::generate(s, prompt, {.n_predict = 16, .sampling = {.temp = 0}}, hooks, history);
    ASSERT_TRUE(st.ok()) << st.error().message;
    EXPECT_EQ(st->stop, engine::StopReason::kEndOfGeneration);
    EXPECT_EQ(st->gen_tokens, 1);
    EXPECT_TRUE(printed.empty());
  }
  // With it, greedy takes the best token that is not the EOS, at every step: as argmax with the EOS at -inf.
  Session s = new_session(**m), by_hand = new_session(**m);
  std::vector<int32_t> history;
  auto st = engine::generate(s, prompt, {.n_predict = 16, .ignore_eos = true, .sampling = {.temp = 0}}, hooks, history);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->stop, engine::StopReason::kPredicted);
  EXPECT_EQ(printed, greedy_without(by_hand, prompt, 16, {eos}));
  EXPECT_EQ(std::count(printed.begin(), printed.end(), eos), 0);
  ASSERT_FALSE(printed.empty());
  EXPECT_NE(printed.front(), eos);

  // Drawn tokens never are the EOS either, whatever the seed.
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Session t = new_session(**m);
    printed.clear();
    history.clear();
    engine::GenerateOptions o{.n_predict = 24, .ignore_eos = true};
    o.sampling = {.temp = 1.5f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = seed};
    ASSERT_TRUE(engine::generate(t, prompt, o, hooks, history).ok());
    EXPECT_EQ(printed.size(), 24u);
    EXPECT_EQ(std::count(printed.begin(), printed.end(), eos), 0) << "seed " << seed;
  }
}

// run on a model with a real tokenizer whose EOS is its first greedy token: without --ignore-eos it prints nothing;
// with it, the greedy text of every step's best token that does not end generation.
TEST(IgnoreEos, RunOnAModelWhoseFirstGreedyTokenIsItsEos) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  const auto dir = temp_dir("ignore_eos_run");
  const std::string path = (dir / "m.gguf").string();
  TinyModel spec;
  spec.tokenizer_from = vocab.string();
  ASSERT_TRUE(write_tiny_model(path, spec).ok());
  const std::string prompt = "The quick brown fox";
  int32_t first = 0;
  std::vector<int32_t> ids;
  {
    auto m = Model::open(path, {.n_ctx = 256, .threads = 2});
    ASSERT_TRUE(m.ok()) << m.error().message;
    auto tok = tokenizer::Tokenizer::from_gguf((*m)->file());
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    ids = tok->encode(prompt, {.parse_special = true});  // as run tokenizes its prompt
    first = first_greedy(**m, ids);
  }
  spec.eos_id = first;
  ASSERT_TRUE(write_tiny_model(path, spec).ok());
  auto m = Model::open(path, {.n_ctx = 256, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  auto tok = tokenizer::Tokenizer::from_gguf((*m)->file());
  ASSERT_TRUE(tok.ok());
  ASSERT_EQ(tok->eos(), first);
  ASSERT_EQ(first_greedy(**m, ids), first);  // the weights did not change

  std::vector<int32_t> eog;
  for (int32_t id = 0; id < int32_t(tok->n_vocab()); ++id)
    if (tok->is_eog(id)) eog.push_back(id);
  Session s = new_session(**m);
  const auto want_ids = greedy_without(s, ids, 12, eog);
  tokenizer::StreamDecoder dec(*tok);
  std::string want;
  for (int32_t id : want_ids) want += dec.push(id);
  want += dec.flush();
  ASSERT_FALSE(want.empty());

  const std::string base = "run -m " + path + " -p '" + prompt + "' -n 12 --temp 0 -t 2 --backend cpu";
  const CliRun stops = run_cli_capture(base);
  EXPECT_EQ(stops.status, 0) << stops.err;
  EXPECT_EQ(stops.out, "");
  EXPECT_NE(stops.err.find("decode 1 tok (n/a)"), std::string::npos) << stops.err;
  const CliRun goes_on = run_cli_capture(base + " --ignore-eos");
  EXPECT_EQ(goes_on.status, 0) << goes_on.err;
  EXPECT_EQ(goes_on.out, want);
  EXPECT_NE(want_ids.front(), first);  // printing the EOS and going on would have started with it
}

}  // namespace
}  // namespace df::test
