// diskformer chat -m MODEL: an interactive conversation with the model's chat template; replies stream to stdout.
// Each turn renders the whole conversation, keeps the KV cache of the tokens it shares with the previous turn and
// evaluates only the rest.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/compute_backend.h"
#include "cli/engine_args.h"
#include "diskformer/chat/template.h"
#include "diskformer/tokenizer/tokenizer.h"

namespace df::cli {

int cmd_chat(int argc, char** argv) {
  Args args("chat", "-m MODEL|--store DIR [--system TEXT] [-n N] [--temp T] [--backend cpu|cuda] [--ram-budget SIZE] [...]");
  add_model_options(args);
  args.option("--system", "TEXT", "system message that starts the conversation");
  add_sampling_options(args);
  args.flag("--quiet", "no logs");
  if (!args.parse(argc, argv)) return args.exit_code();
  auto mo = model_options(args, /*allow_cuda=*/true);
  if (!mo) return args.exit_code();
  const auto path = model_path(args);
  if (!path) return args.exit_code() ? args.exit_code() : 1;
  auto go = generate_options(args, -1);
  if (!go) return args.exit_code();
  const bool quiet = args.has("--quiet");

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
  const std::string bos = tok->bos() >= 0 ? tok->token_to_piece(tok->bos(), true) : "";
  const std::string eos = tok->eos() >= 0 ? tok->token_to_piece(tok->eos(), true) : "";

  chat::ChatInput input;
  input.bos_token = bos;
  input.eos_token = eos;
  if (auto sys = args.get("--system")) input.messages.push_back({{"role", "system"}, {"content", *sys}});

  auto session = open_session("chat", *model);
  if (!session) return 1;
  std::vector<int32_t> cached;  // tokens whose keys and values the session holds, in order
  const bool interactive = isatty(STDIN_FILENO);
  if (interactive && !quiet) std::fprintf(stderr, "diskformer chat: type a message; /exit or end of input quits\n");
  std::string line;
  for (;;) {
    if (interactive) std::fprintf(stderr, "\n> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit") break;
    if (line.empty()) continue;
    input.messages.push_back({{"role", "user"}, {"content", line}});
    auto rendered = chat::render_chat(*tpl, input);
    if (!rendered.ok()) {
      std::fprintf(stderr, "diskformer chat: %s\n", rendered.error().message.c_str());
      return 1;
    }
    // The template writes the BOS text itself where it wants one.
    const bool has_bos = !bos.empty() && rendered->rfind(bos, 0) == 0;
    std::vector<int32_t> ids = tok->encode(*rendered, {.add_bos = has_bos ? std::optional<bool>(false) : std::nullopt,
                                                       .parse_special = true});
    size_t keep = 0;
    while (keep < cached.size() && keep < ids.size() && cached[keep] == ids[keep]) ++keep;
    if (keep == ids.size() && keep > 0) --keep;  // at least one token to evaluate, for fresh logits
    session->truncate(uint32_t(keep));
    cached.resize(keep);
    const std::vector<int32_t> rest(ids.begin() + long(keep), ids.end());

    std::string reply;
    tokenizer::StreamDecoder dec(*tok);
    engine::GenerateHooks hooks;
    hooks.is_eog = [&](int32_t id) { return tok->is_eog(id); };
    hooks.on_token = [&](int32_t id) {
      const std::string bytes = dec.push(id);
      reply += bytes;
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
      std::fflush(stdout);
    };
    std::vector<int32_t> history = cached;
    auto st = engine::generate(*session, rest, *go, hooks, history);
    const std::string tail = dec.flush();
    reply += tail;
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!st.ok()) {
      std::fprintf(stderr, "diskformer chat: %s\n", st.error().message.c_str());
      return 1;
    }
    // The session now holds the prompt and every generated token that was fed back.
    history.resize(session->n_past());
    cached = history;
    input.messages.push_back({{"role", "assistant"}, {"content", reply}});
    if (!quiet) std::fprintf(stderr, "[%s, %s]\n", backend_stats(*model, *session).c_str(), stats_line(*model, *st).c_str());
    if (st->context_full) {
      std::fprintf(stderr, "diskformer chat: the context of %u tokens is full\n", session->n_ctx());
      return 1;
    }
  }
  return 0;
}

}  // namespace df::cli
