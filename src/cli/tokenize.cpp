// diskformer tokenize -m MODEL [--no-bos] [--no-parse-special] [--pieces] (-p TEXT | -f FILE)
// stdout: the ids as one JSON array on one line; with --pieces, [{"id": .., "piece": ..}, ...].
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/text_file.h"
#include "diskformer/gguf/reader.h"
#include "diskformer/tokenizer/tokenizer.h"

namespace df::cli {

int cmd_tokenize(int argc, char** argv) {
  Args args("tokenize", "-m MODEL [--no-bos] [--no-parse-special] [--pieces] (-p TEXT | -f FILE)");
  args.option("-m,--model", "PATH", "GGUF file whose tokenizer.ggml.* vocabulary to use");
  args.option("-p,--prompt", "TEXT", "text to tokenize");
  args.option("-f,--file", "PATH", "read the text from a file (bytes as they are)");
  args.flag("--no-bos", "do not add BOS even where the vocabulary adds it");
  args.flag("--no-parse-special", "control tokens written in the text (<|im_start|>, <s>, ...) are text like any "
            "other (by default they are recognised, as run does)");
  args.flag("--parse-special", "recognise control tokens written in the text (the default; kept for scripts)");
  args.flag("--pieces", "print each id with the text it decodes to (special tokens rendered)");
  if (!args.parse(argc, argv)) return args.exit_code();
  auto model = args.get("--model");
  if (!model) return args.usage_error("missing -m MODEL");
  auto prompt = args.get("--prompt");
  auto file = args.get("--file");
  if (prompt.has_value() == file.has_value()) return args.usage_error("give exactly one of -p TEXT or -f FILE");
  if (args.has("--parse-special") && args.has("--no-parse-special"))
    return args.usage_error("--parse-special and --no-parse-special contradict each other");

  std::string text;
  if (prompt) {
    text = *prompt;
  } else {
    auto read = read_text_file(*file);
    if (!read) {
      std::fprintf(stderr, "diskformer tokenize: %s\n", read.error().message.c_str());
      return 1;
    }
    text = std::move(*read);
  }

  auto gguf_file = gguf::read_file(*model);
  if (!gguf_file.ok()) {
    std::fprintf(stderr, "diskformer tokenize: %s\n", gguf_file.error().message.c_str());
    return 1;
  }
  auto tok = tokenizer::Tokenizer::from_gguf(*gguf_file);
  if (!tok.ok()) {
    std::fprintf(stderr, "diskformer tokenize: %s\n", tok.error().message.c_str());
    return 1;
  }
  tokenizer::EncodeOptions opts{.parse_special = !args.has("--no-parse-special")};
  if (args.has("--no-bos")) opts.add_bos = false;
  const std::vector<int32_t> ids = tok->encode(text, opts);

  nlohmann::json out = nlohmann::json::array();
  for (int32_t id : ids) {
    if (args.has("--pieces"))
      out.push_back({{"id", id}, {"piece", tok->token_to_piece(id, /*render_special=*/true)}});
    else
      out.push_back(id);
  }
  // A piece can be part of a UTF-8 character (byte tokens); JSON shows such bytes as U+FFFD.
  std::string line = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace df::cli
