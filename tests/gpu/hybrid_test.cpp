// A hybrid model (qwen35moe: DeltaNet layers with a recurrent state) on the CUDA backend, as tests/engine/hybrid_test.cpp
// checks the CPU's sequence: truncate() anywhere -- onto a copy of the state, between copies, before them, into
// positions still to be recomputed -- then eval continues as a fresh session given the kept tokens and the new ones;
// a refused batch changes nothing; a two-turn chat equals the conversation rendered and run in one go; inspect plans
// the model for the GPU.
//
// A fresh session run in the same batches as the truncated one (the copy's position, then the rest) gives the same
// logits bit for bit (the kernels are deterministic; experts per (token, slot), whose batches repeat the same
// operations). Where the copy was taken inside a batch, the fresh run's batches differ, and with them the GPU's
// summation orders (tensor-core tiles from 16 tokens on, the split attention): logits within the GPU-vs-CPU bound
// of forward_test.cpp and the same greedy token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "diskformer/chat/template.h"
#include "diskformer/engine/generate.h"
#include "diskformer/tokenizer/tokenizer.h"
#include "gpu/gpu_support.h"
#include "support/cli_run.h"
#include "support/compare.h"
#include "support/sessions.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

constexpr const char* kModel = "models/qwen35moe-q8_0.gguf";

std::vector<float> last_row(engine::Session& s, int64_t V) {
  auto l = s.logits();
  return {l.end() - V, l.end()};
}


void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double d = 0, mag = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d = std::max(d, std::fabs(double(got[i]) - double(want[i])));
    mag = std::max(mag, std::fabs(double(want[i])));
  }
  std::printf("[gpu-hybrid] %s: max abs diff %.4g (max |logit| %.3g)\n", what.c_str(), d, mag);
  EXPECT_LE(d, 0.02 * mag + 1e-3) << what;
  EXPECT_EQ(sampling::argmax(got), sampling::argmax(want)) << what;
}

class GpuHybrid : public ::testing::TestWithParam<bool> {};  // decode through the CUDA graph

TEST_P(GpuHybrid, TruncateAnywhereThenEvalContinuesAsAFreshRun) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, kModel);
  auto m = open_gpu(path.string(), 256, {.decode_graph = GetParam(), .grouped_experts = false});
  ASSERT_TRUE(m);
  const int64_t V = m->spec().n_vocab;
  // 14 prompt tokens (copies of the state at 6, inside the batch, and at 14), then 6 decode steps: n_past 19.
  const std::vector<int32_t> prompt = {785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 576, 1156, 2310, 11};
  const std::vector<int32_t> next = {3555, 1052, 374, 264, 1273};
  // Onto the copy at the prompt's end; after it; onto the copy 8 before the end; between the copies; before both;
  // twice, the second cut inside the positions the first left to recompute, and below the copy the first restored.
  const std::vector<std::vector<uint32_t>> cuts = {{14}, {17}, {6}, {10}, {3}, {17, 15}, {17, 12}};
  for (const auto& cut : cuts) {
    auto s = session_of(*m);
    ASSERT_TRUE(s);
    ASSERT_TRUE(s->eval(prompt).ok());
    const std::vector<int32_t> generated = greedy_continue(*s, 6);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), generated.begin(), generated.end() - 1);
    ASSERT_EQ(s->n_past(), all.size());
    for (uint32_t keep : cut) {
      s->truncate(keep);
      EXPECT_EQ(s->n_past(), keep);
    }
    ASSERT_TRUE(s->eval(next).ok());
    EXPECT_EQ(s->n_past(), cut.back() + next.size());
    std::vector<int32_t> ids(all.begin(), all.begin() + cut.back());
    ids.insert(ids.end(), next.begin(), next.end());
    // The copy the cut went back to: the prompt's end (14) or 8 before it (6), else none.
    const uint32_t copy = cut.back() >= 14 ? 14 : cut.back() >= 6 ? 6 : 0;
    auto fresh = session_of(*m);
    ASSERT_TRUE(fresh);
    if (copy) {
      ASSERT_TRUE(fresh->eval(std::span(ids).first(copy)).ok());
    }
    ASSERT_TRUE(fresh->eval(std::span(ids).subspan(copy)).ok());
    const std::string what = "kept " + std::to_string(cut.back());
    if (copy != 6) {
      EXPECT_TRUE(same_bits(last_row(*s, V), last_row(*fresh, V))) << what;
    } else {
      expect_close(last_row(*s, V), last_row(*fresh, V), what);
    }
  }
}

TEST_P(GpuHybrid, AllLogitsAfterTruncateAreTheCallersRowsOnly) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, kModel);
  auto m = open_gpu(path.string(), 128, {.decode_graph = GetParam(), .grouped_experts = false});
  ASSERT_TRUE(m);
  const std::vector<int32_t> a = {785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 576, 1156};
  const std::vector<int32_t> b = {3555, 1052, 374};
  auto s = session_of(*m);
  auto fresh = session_of(*m);
  ASSERT_TRUE(s && fresh);
  ASSERT_TRUE(s->eval(a).ok());
  s->truncate(7);  // back to the copy at 4 (12 - 8): positions 4..6 are recomputed with b
  ASSERT_TRUE(s->eval(b, /*all_logits=*/true).ok());
  ASSERT_TRUE(fresh->eval(std::span(a).first(4)).ok());
  ASSERT_TRUE(fresh->eval(std::vector<int32_t>{a[4], a[5], a[6], b[0], b[1], b[2]}, /*all_logits=*/true).ok());
  const int64_t V = m->spec().n_vocab;
  ASSERT_EQ(s->logits().size(), b.size() * V);
  auto lf = fresh->logits();
  const std::vector<float> want(lf.end() - int64_t(b.size()) * V, lf.end());
  expect_close({s->logits().begin(), s->logits().end()}, want, "all logits after truncate");
}

TEST_P(GpuHybrid, ARefusedBatchChangesNothing) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, kModel);
  auto m = open_gpu(path.string(), 64, {.decode_graph = GetParam(), .grouped_experts = false});
  ASSERT_TRUE(m);
  const std::vector<int32_t> a = {785, 3974, 13876, 38835}, b = {34208, 916};
  auto s = session_of(*m);
  auto fresh = session_of(*m);
  ASSERT_TRUE(s && fresh);
  ASSERT_TRUE(s->eval(a).ok());
  EXPECT_FALSE(s->eval(std::vector<int32_t>{916, -1}).ok());
  EXPECT_FALSE(s->eval(std::vector<int32_t>(61, 916)).ok());  // context overflow
  EXPECT_EQ(s->n_past(), a.size());
  ASSERT_TRUE(s->eval(b).ok());
  ASSERT_TRUE(fresh->eval(a).ok());
  ASSERT_TRUE(fresh->eval(b).ok());
  const int64_t V = m->spec().n_vocab;
  EXPECT_TRUE(same_bits(last_row(*s, V), last_row(*fresh, V)));
}

INSTANTIATE_TEST_SUITE_P(Decode, GpuHybrid, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "graph" : "launches"; });

// The reply chat prints for a conversation, generated on the GPU from one fresh session.
std::string reply_in_one_go(engine::Model& m, const tokenizer::Tokenizer& tok, const chat::Template& tpl,
                            const chat::ChatInput& input, int n) {
  auto rendered = chat::render_chat(tpl, input);
  EXPECT_TRUE(rendered.ok()) << rendered.error().message;
  const std::vector<int32_t> ids = tok.encode(*rendered, {.parse_special = true});
  auto s = session_of(m);
  if (!s) return {};
  std::vector<int32_t> history;
  std::string text;
  tokenizer::StreamDecoder dec(tok);
  engine::GenerateHooks hooks;
  hooks.on_token = [&](int32_t id) { text += dec.push(id); };
  hooks.is_eog = [&](int32_t id) { return tok.is_eog(id); };
  auto st = engine::generate(*s, ids, {.n_predict = n, .ignore_eos = true, .sampling = {.temp = 0}}, hooks, history);
  EXPECT_TRUE(st.ok()) << st.error().message;
  return text + dec.flush();
}

// chat's second turn reuses the first's cached positions and state (model/state_copies.h): its replies are those
// of the whole conversation rendered and run in one go on the same backend.
TEST(GpuHybridChat, TwoTurnsEqualTheConversationRunInOneGo) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, kModel);
  const std::string turns[] = {"Hello", "And then?"};
  const CliRun r = run_cli_capture("chat --backend cuda -m " + path.string() + " -n 8 --temp 0 --ignore-eos --quiet",
                                   turns[0] + "\n" + turns[1] + "\n");
  ASSERT_EQ(r.status, 0) << r.err;
  auto m = open_gpu(path.string(), 4096);
  ASSERT_TRUE(m);
  auto tok = tokenizer::Tokenizer::from_gguf(m->file());
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  auto tpl = chat::Template::parse(m->file().get_string_or("tokenizer.chat_template", ""), "chat_template");
  ASSERT_TRUE(tpl.ok()) << tpl.error().message;
  chat::ChatInput input;
  input.bos_token = tok->token_to_piece(tok->bos(), true);
  input.eos_token = tok->token_to_piece(tok->eos(), true);
  input.messages.push_back({{"role", "user"}, {"content", turns[0]}});
  const std::string first = reply_in_one_go(*m, *tok, *tpl, input, 8);
  input.messages.push_back({{"role", "assistant"}, {"content", first}});
  input.messages.push_back({{"role", "user"}, {"content", turns[1]}});
  const std::string second = reply_in_one_go(*m, *tok, *tpl, input, 8);
  EXPECT_EQ(r.out, first + "\n" + second + "\n");
}

}  // namespace
}  // namespace df::test
