// A hybrid model's sequence (qwen35moe: DeltaNet layers with a recurrent state): truncate() anywhere -- onto a copy
// of the state, between copies, before all of them, into positions still to be recomputed -- then eval equals a
// fresh session given the kept tokens and the new ones in one batch; a two-turn chat equals the same conversation
// rendered and run in one go; the RAM and GPU plans count the state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cpu/recurrent_state.h"
#include "diskformer/backend/cuda/plan.h"
#include "diskformer/engine/model_files.h"
#include "diskformer/chat/template.h"
#include "diskformer/engine/generate.h"
#include "diskformer/engine/model.h"
#include "diskformer/gguf/reader.h"
#include "diskformer/gguf/writer.h"
#include "diskformer/sampling/sampler.h"
#include "diskformer/tokenizer/tokenizer.h"
#include "model/gold.h"
#include "support/cli_run.h"
#include "support/sessions.h"
#include "support/test_paths.h"
#include "support/compare.h"

namespace df::test {
namespace {

using engine::Model;
using engine::Session;

constexpr const char* kModel = "models/qwen35moe-q8_0.gguf";

std::vector<float> logits_of(Session& s) { return {s.logits().begin(), s.logits().end()}; }


TEST(HybridSequence, TruncateAnywhereThenEvalEqualsAFreshRun) {
  DF_REQUIRE_SHARED(path, kModel);
  auto m = Model::open(path.string(), {.n_ctx = 256, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  // 14 prompt tokens (copies of the state at 6 and 14), then 6 decode steps: n_past 19.
  const std::vector<int32_t> prompt = {785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 576, 1156, 2310, 11};
  const std::vector<int32_t> next = {3555, 1052, 374, 264, 1273};
  // Onto the copy at the prompt's end; after it (decoded positions recomputed); onto the copy 8 before the end;
  // between the copies; before both; twice, the second cut inside the positions the first left to recompute, and
  // below the copy the first restored.
  const std::vector<std::vector<uint32_t>> cuts = {{14}, {17}, {6}, {10}, {3}, {17, 15}, {17, 12}};
  for (const auto& cut : cuts) {
    Session s = new_session(**m);
    ASSERT_TRUE(s.eval(prompt).ok());
    const std::vector<int32_t> generated = greedy_continue(s, 6);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), generated.begin(), generated.end() - 1);
    ASSERT_EQ(s.n_past(), all.size());
    for (uint32_t keep : cut) {
      s.truncate(keep);
      EXPECT_EQ(s.n_past(), keep);
    }
    ASSERT_TRUE(s.eval(next).ok());
    std::vector<int32_t> ids(all.begin(), all.begin() + cut.back());
    ids.insert(ids.end(), next.begin(), next.end());
    Session fresh = new_session(**m);
    ASSERT_TRUE(fresh.eval(ids).ok());
    EXPECT_EQ(s.n_past(), fresh.n_past());
    EXPECT_TRUE(same_bits(logits_of(s), logits_of(fresh))) << "kept " << cut.back();
  }
}

// A fresh evaluation in batches below the 64 rows from which attention takes its tiled kernel: the orders the turns'
// pieces took (this model's Q8_0 products and the one-query attention do not depend on the batch otherwise).
void eval_below_tiled(Session& s, const std::vector<int32_t>& ids) {
  constexpr size_t kPiece = size_t(cpu::kTiledRows) - 1;
  for (size_t i = 0; i < ids.size(); i += kPiece) {
    const size_t n = std::min(kPiece, ids.size() - i);
    ASSERT_TRUE(s.eval(std::span<const int32_t>(ids.data() + i, n)).ok());
  }
}

// Turn after turn (more turns than copies are kept): each turn cuts back into the previous one and continues.
TEST(HybridSequence, ManyTurnsEachCutIntoTheLastOne) {
  DF_REQUIRE_SHARED(path, kModel);
  auto m = Model::open(path.string(), {.n_ctx = 512, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  Session s = new_session(**m);
  std::vector<int32_t> kept;
  for (int turn = 0; turn < 7; ++turn) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 12; ++i) prompt.push_back(int32_t(1000 + 37 * turn + 11 * i));
    ASSERT_TRUE(s.eval(prompt).ok());
    kept.insert(kept.end(), prompt.begin(), prompt.end());
    const std::vector<int32_t> reply = greedy_continue(s, 4);
    kept.insert(kept.end(), reply.begin(), reply.end() - 1);
    // The next turn keeps all but the last 2 prompt tokens and the reply (a template rewriting its tail).
    const uint32_t keep = uint32_t(kept.size()) - 5;
    s.truncate(keep);
    kept.resize(keep);
    Session fresh = new_session(**m);
    std::vector<int32_t> ids = kept;
    ids.push_back(7);
    ids.push_back(8);
    ASSERT_TRUE(s.eval(std::vector<int32_t>{7, 8}).ok());
    eval_below_tiled(fresh, ids);
    EXPECT_TRUE(same_bits(logits_of(s), logits_of(fresh))) << "turn " << turn;
    kept.push_back(7);
    kept.push_back(8);
  }
}

TEST(HybridSequence, AllLogitsAfterTruncateAreTheCallersRowsOnly) {
  DF_REQUIRE_SHARED(path, kModel);
  auto m = Model::open(path.string(), {.n_ctx = 128, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const std::vector<int32_t> a = {785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 576, 1156};
  const std::vector<int32_t> b = {3555, 1052, 374};
  Session s = new_session(**m), fresh = new_session(**m);
  ASSERT_TRUE(s.eval(a).ok());
  s.truncate(7);  // back to the copy at 4: positions 4..6 are recomputed with b
  ASSERT_TRUE(s.eval(b, /*all_logits=*/true).ok());
  std::vector<int32_t> ids(a.begin(), a.begin() + 7);
  ASSERT_TRUE(fresh.eval(ids).ok());
  ASSERT_TRUE(fresh.eval(b, /*all_logits=*/true).ok());
  EXPECT_EQ(s.logits().size(), b.size() * (*m)->spec().n_vocab);
  EXPECT_TRUE(same_bits(logits_of(s), logits_of(fresh)));
}

TEST(HybridSequence, ARefusedBatchChangesNothing) {
  DF_REQUIRE_SHARED(path, kModel);
  auto m = Model::open(path.string(), {.n_ctx = 64, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const std::vector<int32_t> a = {785, 3974, 13876, 38835}, b = {34208, 916};
  Session s = new_session(**m), fresh = new_session(**m);
  ASSERT_TRUE(s.eval(a).ok());
  EXPECT_FALSE(s.eval(std::vector<int32_t>{916, -1}).ok());
  EXPECT_FALSE(s.eval(std::vector<int32_t>(61, 916)).ok());  // context overflow
  EXPECT_EQ(s.n_past(), a.size());
  ASSERT_TRUE(s.eval(b).ok());
  ASSERT_TRUE(fresh.eval(a).ok());
  ASSERT_TRUE(fresh.eval(b).ok());
  EXPECT_TRUE(same_bits(logits_of(s), logits_of(fresh)));
}

TEST(HybridSequence, PlanCountsTheStateAndAttentionLayersOnly) {
  DF_REQUIRE_SHARED(path, kModel);
  auto m = Model::open(path.string(), {.n_ctx = 512, .threads = 1});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto& spec = (*m)->spec();
  EXPECT_EQ(spec.family, model::Family::kQwen35Moe);
  EXPECT_EQ(spec.n_layer, 8u);  // block_count 9 less the MTP block
  EXPECT_EQ(spec.n_recurrent(), 6u);
  const auto& p = (*m)->plan();
  // 2 attention layers x 512 positions x (256 + 256) f16; 6 DeltaNet layers x (3 x 1024 conv + 4 x 128 x 128) f32,
  // the live state, its 4 copies and a spare.
  EXPECT_EQ(p.kv_bytes, 2ull * 512 * 512 * 2);
  EXPECT_EQ(p.state_bytes, 6ull * 6 * (3 * 1024 + 4 * 128 * 128) * 4);
  EXPECT_NE((*m)->describe().find("recurrent state"), std::string::npos) << (*m)->describe();
}

// The GPU plan counts the DeltaNet layers' weights, the KV cache of the attention layers only and the recurrent
// state (live, and its copy inside a batch) with the session's buffers.
TEST(HybridSequence, GpuPlanCountsTheStateAndAttentionLayersOnly) {
  DF_REQUIRE_SHARED(path, kModel);
  auto f = engine::open_model_files(path.string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  const auto& spec = (*f)->spec;
  auto p = cuda::plan_gpu(spec, (*f)->tensors, (*f)->layouts, {.n_ctx = 512});
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->resident.kv_cache, 2ull * 512 * 512 * 2);
  EXPECT_EQ(p->resident.recurrent, 2ull * 6 * (3 * 1024 + 4 * 128 * 128) * 4);
  EXPECT_EQ(cuda::recurrent_state_bytes(spec), cpu::RecurrentState::bytes_for(spec));
  // The chunked delta rule's matrices among the work buffers: per 64-token chunk of a batch and v head, T and P
  // (64 x 64 f32 each), the decays and the update rates; a batch of 100 takes two chunks.
  const uint64_t per_chunk = (2 * 64 * 64 + 2 * 64) * 4;
  EXPECT_EQ(cuda::session_buffers(spec, {.n_ctx = 512, .max_batch = 512})[cuda::Buf::ssm_chunks], 8 * 4 * per_chunk);
  EXPECT_EQ(cuda::session_buffers(spec, {.n_ctx = 512, .max_batch = 100})[cuda::Buf::ssm_chunks], 2 * 4 * per_chunk);
  EXPECT_EQ(cuda::session_buffers(spec, {.n_ctx = 512, .max_batch = 1})[cuda::Buf::ssm_chunks], 1 * 4 * per_chunk);
  // Every DeltaNet projection is in the attention item, the shared experts in the dense FFN one.
  uint64_t delta = 0, shared = 0;
  for (const auto& l : (*f)->tensors.layers) {
    for (auto* t : {l.ssm_qkv, l.ssm_z, l.ssm_beta, l.ssm_alpha, l.ssm_out})
      if (t) delta += t->n_bytes;
    for (auto* t : {l.gate_shexp, l.up_shexp, l.down_shexp}) shared += t->n_bytes;
  }
  EXPECT_GT(delta, 0u);
  EXPECT_GE(p->resident.attention, delta);
  EXPECT_GE(p->resident.dense_ffn, shared);
  EXPECT_NE(p->describe().find("recurrent state"), std::string::npos) << p->describe();
}

// The reply the chat command prints for a conversation, generated here from one fresh session.
std::string reply_in_one_go(Model& m, const tokenizer::Tokenizer& tok, const chat::Template& tpl,
                            const chat::ChatInput& input, int n) {
  auto rendered = chat::render_chat(tpl, input);
  EXPECT_TRUE(rendered.ok()) << rendered.error().message;
  const std::vector<int32_t> ids = tok.encode(*rendered, {.parse_special = true});
  Session s = new_session(m);
  std::vector<int32_t> history;
  std::string text;
  tokenizer::StreamDecoder dec(tok);
  engine::GenerateHooks hooks;
  hooks.on_token = [&](int32_t id) { text += dec.push(id); };
  hooks.is_eog = [&](int32_t id) { return tok.is_eog(id); };  // banned under ignore_eos, as chat bans them
  auto st = engine::generate(s, ids, {.n_predict = n, .ignore_eos = true, .sampling = {.temp = 0}}, hooks, history);
  EXPECT_TRUE(st.ok()) << st.error().message;
  return text + dec.flush();
}

// The model's GGUF with another chat template (tensor data copied as it is).
void copy_with_chat_template(const std::string& from, const std::string& to, const std::string& tpl) {
  auto f = gguf::read_file(from);
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto w = gguf::Writer::create(to, {.alignment = f->alignment});
  ASSERT_TRUE(w.ok()) << w.error().message;
  for (const auto& kv : f->metadata) w->set(kv.key, kv.value);
  w->set("tokenizer.chat_template", gguf::Value::string(tpl));
  for (const auto& t : f->tensors) ASSERT_TRUE(w->add_tensor(t.name, t.type, t.shape).ok());
  ASSERT_TRUE(w->write_header().ok());
  const std::string bytes = slurp(from);
  for (const auto& t : f->tensors) ASSERT_TRUE(w->write_data(bytes.data() + t.offset, t.n_bytes).ok());
  ASSERT_TRUE(w->finish().ok());
}

// chat's second turn reuses the first's cached positions: with the model's template they are all a prefix of the
// second prompt (the state simply continues); the Qwen3.5 template renders the first reply without the "<think>\n"
// its generation prompt ended with, so the second turn cuts into the first prompt and the state comes back from a
// copy. Either way the replies are those of the whole conversation rendered and run in one go.
void check_two_turns(const std::string& model_path) {
  const std::string turns[] = {"Hello", "And then?"};
  const CliRun r = run_cli_capture("chat --backend cpu -m " + model_path + " -n 8 --temp 0 --ignore-eos -t 2 --quiet",
                                   turns[0] + "\n" + turns[1] + "\n");
  ASSERT_EQ(r.status, 0) << r.err;

  auto m = Model::open(model_path, {.n_ctx = 4096, .threads = 2});
  ASSERT_TRUE(m.ok()) << m.error().message;
  auto tok = tokenizer::Tokenizer::from_gguf((*m)->file());
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  auto tpl = chat::Template::parse((*m)->file().get_string_or("tokenizer.chat_template", ""), "chat_template");
  ASSERT_TRUE(tpl.ok()) << tpl.error().message;
  chat::ChatInput input;
  input.bos_token = tok->token_to_piece(tok->bos(), true);
  input.eos_token = tok->token_to_piece(tok->eos(), true);
  input.messages.push_back({{"role", "user"}, {"content", turns[0]}});
  const std::string first = reply_in_one_go(**m, *tok, *tpl, input, 8);
  input.messages.push_back({{"role", "assistant"}, {"content", first}});
  input.messages.push_back({{"role", "user"}, {"content", turns[1]}});
  const std::string second = reply_in_one_go(**m, *tok, *tpl, input, 8);
  EXPECT_EQ(r.out, first + "\n" + second + "\n");
}

TEST(HybridChat, TwoTurnsEqualTheConversationRunInOneGo) {
  DF_REQUIRE_SHARED(path, kModel);
  check_two_turns(path.string());
}

TEST(HybridChat, TwoTurnsEqualOneGoWhereTheTemplateRewritesTheFirstPrompt) {
  DF_REQUIRE_SHARED(path, kModel);
  DF_REQUIRE_SHARED(jinja, "templates/jinja/Qwen3.5-4B.jinja");
  const std::string copy = (temp_dir("hybrid_chat") / "qwen35-template.gguf").string();
  copy_with_chat_template(path.string(), copy, slurp(jinja));
  check_two_turns(copy);
}

// The run command prints llama.cpp's completion of a stable case, all resident and with its experts streamed;
// inspect plans the model for the GPU.
TEST(HybridCli, RunPrintsLlamaCppsCompletionAndInspectPlansItForTheGpu) {
  DF_REQUIRE_SHARED(path, kModel);
  const auto cases = read_gold((shared_dir() / "models/qwen35moe-q8_0.gold.json").string());
  const GoldCase& c = cases.at(0);
  ASSERT_TRUE(c.stable);
  const std::string base =
      "run --backend cpu -m " + path.string() + " -p '" + c.prompt + "' -n 32 --temp 0 --ignore-eos -t 2 -c 512";
  // The smallest budget the plan accepts at that context: experts through 2 x top-k slots.
  auto probe = Model::open(path.string(), {.n_ctx = 512, .threads = 1, .ram_budget = uint64_t(1) << 30});
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  const std::string least = " --ram-budget " + std::to_string((*probe)->plan().min_budget());
  for (const std::string& budget : {std::string(), least}) {
    const CliRun r = run_cli_capture(base + budget);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, c.completion) << budget;
    if (!budget.empty()) {
      EXPECT_NE(r.err.find("experts streamed"), std::string::npos) << r.err;
    }
  }
  const CliRun plan = run_cli_capture("inspect -m " + path.string() + " --gpu-budget 4G");
  EXPECT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find("all resident"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("recurrent state"), std::string::npos) << plan.out;
}

}  // namespace
}  // namespace df::test
