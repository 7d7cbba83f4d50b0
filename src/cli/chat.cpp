// diskformer chat -m MODEL: an interactive conversation with the model's chat template; replies stream to stdout.
// Each turn renders the whole conversation, keeps the KV cache of the tokens it shares with the previous turn and
// evaluates only the rest. A full context drops the oldest turns (conversation.h) and the reply goes on; Ctrl-C ends
// the reply and returns to the prompt, a second one (or one at the prompt) quits.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/compute_backend.h"
#include "cli/conversation.h"
#include "cli/engine_args.h"
#include "cli/gen_stats.h"
#include "cli/interrupt.h"
#include "diskformer/chat/template.h"
#include "diskformer/tokenizer/tokenizer.h"

namespace df::cli {

namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// Answers the conversation's last message into the session, streaming the reply to stdout and adding it to the
// conversation. The session keeps the keys and values of `cached`; each reply evaluates only what follows the prefix
// it shares with them.
struct Replier {
  engine::Session& session;
  Conversation& conv;
  const tokenizer::Tokenizer& tok;
  const engine::GenerateOptions& options;
  Interrupt& interrupt;
  std::vector<int32_t> cached = {};  // tokens whose keys and values the session holds, in order

  // The reply's stats; nullopt where the message does not fit the context even alone (it is left out).
  Result<std::optional<engine::GenerateStats>> reply() {
    const uint32_t n_ctx = session.n_ctx();
    std::string text;
    std::vector<int32_t> reply_ids;  // the reply's tokens so far
    tokenizer::StreamDecoder dec(tok);
    engine::GenerateHooks hooks;
    hooks.is_eog = [&](int32_t id) { return tok.is_eog(id); };
    hooks.on_token = [&](int32_t id) {
      reply_ids.push_back(id);
      const std::string bytes = dec.push(id);
      text += bytes;
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
      std::fflush(stdout);
    };
    hooks.stop = [&] { return interrupt.requested(); };
    interrupt.clear();
    engine::GenerateStats st;
    // In parts: each time the context fills, the conversation shifts and the reply goes on.
    for (;;) {
      DF_ASSIGN(std::vector<int32_t> ids, conv.tokens(reply_ids));
      if (ids.size() >= n_ctx) {  // no room for a token: shift first, where that makes room
        Conversation shifted = conv;
        std::vector<int32_t> shifted_ids = ids;
        DF_ASSIGN(const int dropped, drop_to_fit(shifted, shifted_ids, reply_ids));
        if (shifted_ids.size() >= n_ctx) {
          if (reply_ids.empty()) {
            std::fprintf(stderr, "diskformer chat: the message takes %zu tokens after the system message, more than "
                         "the context of %u (-c); it is left out\n", shifted_ids.size(), n_ctx);
            conv.drop_last();
            return std::optional<engine::GenerateStats>{};
          }
          std::fprintf(stderr, "\ndiskformer chat: the reply stops: this turn alone fills the context of %u tokens\n",
                       n_ctx);
          break;
        }
        say_shifted(dropped, ids.size(), shifted_ids.size());
        conv = shifted;
        ids = std::move(shifted_ids);
      }
      size_t keep = common_prefix(cached, ids);
      if (keep == ids.size()) --keep;  // at least one token to evaluate, for fresh logits
      session.truncate(uint32_t(keep));
      cached.resize(keep);
      const std::vector<int32_t> rest(ids.begin() + long(keep), ids.end());
      engine::GenerateOptions part = options;
      if (options.n_predict >= 0) part.n_predict = options.n_predict - int32_t(reply_ids.size());
      std::vector<int32_t> history = cached;
      interrupt.set_generating(true);
      auto r = engine::generate(session, rest, part, hooks, history);
      interrupt.set_generating(false);
      if (!r.ok()) return r.take_error();
      // The session holds the prompt and every generated token that was fed back.
      history.resize(session.n_past());
      cached = std::move(history);
      st += *r;
      if (r->stop != engine::StopReason::kContextFull) break;
      DF_ASSIGN(std::vector<int32_t> now, conv.tokens(reply_ids));
      const size_t before = now.size();
      DF_ASSIGN(const int dropped, drop_to_fit(conv, now, reply_ids));
      if (dropped == 0) {
        std::fprintf(stderr, "\ndiskformer chat: the reply stops: this turn alone fills the context of %u tokens\n",
                     n_ctx);
        break;
      }
      say_shifted(dropped, before, now.size());
    }
    const std::string tail = dec.flush();
    text += tail;
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    conv.add("assistant", text);  // an interrupted reply too: what was written is part of the conversation
    return std::optional<engine::GenerateStats>{st};
  }

  // The context shift: drops the oldest turns of `c` until it and the reply so far take at most half the context
  // (llama.cpp discards half of what follows its kept tokens); ids become its tokens. Returns the turns dropped.
  Result<int> drop_to_fit(Conversation& c, std::vector<int32_t>& ids, std::span<const int32_t> reply) const {
    int dropped = 0;
    while (ids.size() > session.n_ctx() / 2 && c.drop_oldest_turn()) {
      ++dropped;
      DF_ASSIGN(ids, c.tokens(reply));
    }
    return dropped;
  }

  void say_shifted(int dropped, size_t before, size_t after) const {
    std::fprintf(stderr, "\ndiskformer chat: the context of %u tokens is full: dropped the oldest %d turn%s (%zu -> "
                 "%zu tokens), the system message kept\n", session.n_ctx(), dropped, dropped == 1 ? "" : "s", before,
                 after);
  }
};

}  // namespace

int cmd_chat(int argc, char** argv) {
  Args args("chat", "-m MODEL|-hf ORG/REPO[:QUANT]|--store DIR [--system TEXT] [-n N] [--temp T] [--backend cpu|cuda] [--ram-budget SIZE] [...]");
  add_model_options(args);
  args.option("--system", "TEXT", "system message that starts the conversation (kept when the context shifts)");
  add_sampling_options(args, -1);
  args.flag("--json-stats", "after each reply, its stats as one JSON object on stderr instead of the stats line");
  args.flag("--quiet", "no logs");
  if (!args.parse(argc, argv)) return args.exit_code();
  auto mo = model_options(args, /*allow_cuda=*/true);
  if (!mo) return args.exit_code();
  const auto path = model_path(args);
  if (!path) return args.exit_code() ? args.exit_code() : 1;
  auto go = generate_options(args, -1);
  if (!go) return args.exit_code();
  const bool quiet = args.has("--quiet"), json_stats = args.has("--json-stats");

  const auto backend = choose_backend("chat", args);
  if (!backend) return 1;
  mo->backend = *backend;
  auto model = open_model("chat", *path, *mo, quiet, /*cpu_fallback=*/!args.has("--backend"));
  if (!model) return 1;
  auto tok = tokenizer::Tokenizer::from_gguf(model->file());
  if (!tok.ok()) {
    std::fprintf(stderr, "diskformer chat: %s\n", tok.error().message.c_str());
    return 1;
  }
  check_ignore_eos(args, *tok, *go);
  std::string source = model->file().get_string_or("tokenizer.chat_template", "");
  if (source.empty()) {
    if (!quiet) std::fprintf(stderr, "diskformer chat: %s has no tokenizer.chat_template; using ChatML\n", path->c_str());
    source = chat::chatml_template();
  }
  auto tpl = chat::Template::parse(source, *path + ":tokenizer.chat_template");
  if (!tpl.ok()) {
    std::fprintf(stderr, "diskformer chat: %s\n", tpl.error().message.c_str());
    return 1;
  }
  Conversation conv(*tpl, *tok, args.get_or("--system", ""));

  auto session = open_session("chat", *model);
  if (!session) return 1;
  const bool interactive = isatty(STDIN_FILENO);
  if (interactive && !quiet)
    std::fprintf(stderr, "diskformer chat: type a message; /exit, end of input or Ctrl-C quits (Ctrl-C during a "
                         "reply ends the reply)\n");
  Interrupt interrupt;
  Replier replier{.session = *session, .conv = conv, .tok = *tok, .options = *go, .interrupt = interrupt};
  std::string line;
  for (int turn = 1;; ++turn) {
    if (interactive) std::fprintf(stderr, "\n> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit") break;
    if (line.empty()) continue;
    conv.add("user", line);
    auto st = replier.reply();
    if (!st.ok()) {
      std::fprintf(stderr, "\ndiskformer chat: %s\n", st.error().message.c_str());
      return 1;
    }
    if (!*st) continue;  // the message was left out
    if ((*st)->stop == engine::StopReason::kStopped && !quiet) std::fprintf(stderr, "diskformer chat: reply interrupted\n");
    if (json_stats) {
      nlohmann::ordered_json j = stats_json(*model, *session, **st);
      j["turn"] = turn;
      std::fprintf(stderr, "%s\n", j.dump().c_str());
    } else if (!quiet) {
      std::fprintf(stderr, "[%s, %s]\n", backend_stats(*model, *session).c_str(), stats_line(*model, **st).c_str());
    }
  }
  return 0;
}

}  // namespace df::cli
