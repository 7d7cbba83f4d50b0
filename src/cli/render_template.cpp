// diskformer render-template (-m MODEL | --template FILE) --messages FILE.json [--bos S] [--eos S]
//                            [--no-generation-prompt] [--now "YYYY-MM-DD HH:MM:SS"]
// Prints the prompt a chat template makes of a conversation, byte for byte, and nothing else on stdout.
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/text_file.h"
#include "diskformer/chat/template.h"
#include "diskformer/gguf/reader.h"

namespace df::cli {

namespace {

using ojson = nlohmann::ordered_json;

struct ModelTemplate {
  std::string source, bos, eos;
};

// tokenizer.chat_template and the texts of the bos/eos tokens (empty where the model has none).
Result<ModelTemplate> model_template(const std::string& path) {
  DF_ASSIGN(gguf::File f, gguf::read_file(path));
  ModelTemplate m;
  DF_ASSIGN(m.source, f.get_string("tokenizer.chat_template"));
  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  const gguf::Array* arr = tokens ? tokens->array() : nullptr;
  auto token_text = [&](const char* key, std::string& out) -> Status {
    const gguf::Value* v = f.find(key);
    if (!v) return Status::Ok();
    auto id = v->to_u64();
    if (!id) return Error{path + ": " + key + " is not an integer"};
    if (!arr || *id >= arr->items.size() || !arr->items[*id].str())
      return Error{path + ": " + key + " = " + std::to_string(*id) + " is outside tokenizer.ggml.tokens (" +
                   std::to_string(arr ? arr->items.size() : 0) + " tokens)"};
    out = *arr->items[*id].str();
    return Status::Ok();
  };
  DF_TRY(token_text("tokenizer.ggml.bos_token_id", m.bos));
  DF_TRY(token_text("tokenizer.ggml.eos_token_id", m.eos));
  return m;
}

// "YYYY-MM-DD HH:MM:SS" or "YYYY-MM-DD" (midnight), read as local time for strftime_now().
std::optional<std::tm> parse_now(const std::string& text) {
  std::tm tm{};
  for (const char* format : {"%Y-%m-%d %H:%M:%S", "%Y-%m-%d"}) {
    tm = {};
    const char* end = strptime(text.c_str(), format, &tm);
    if (end && *end == '\0') {
      // mktime fills in the weekday and day of the year that %a and %j print.
      std::tm normal = tm;
      normal.tm_isdst = -1;
      // A day past its month's end comes back moved into the next month: refused.
      if (mktime(&normal) == -1 || normal.tm_mday != tm.tm_mday || normal.tm_mon != tm.tm_mon) return std::nullopt;
      tm.tm_wday = normal.tm_wday;
      tm.tm_yday = normal.tm_yday;
      return tm;
    }
  }
  return std::nullopt;
}

int fail_with(const std::string& message) {
  std::fprintf(stderr, "diskformer render-template: %s\n", message.c_str());
  return 1;
}

}  // namespace

int cmd_render_template(int argc, char** argv) {
  Args args("render-template",
            "(-m MODEL | --template FILE) --messages FILE.json [--bos S] [--eos S] [--no-generation-prompt] "
            "[--now \"YYYY-MM-DD HH:MM:SS\"]");
  args.option("-m,--model", "PATH", "GGUF model whose tokenizer.chat_template to render");
  args.option("--template", "FILE", "a Jinja chat template file instead of a model's");
  args.option("--messages", "FILE.json",
              "('-': stdin) a JSON array of {role, content, ...}, or an object {\"messages\": [...], \"tools\": [...], ...} whose "
              "other keys become template variables");
  args.option("--bos", "S", "text of bos_token (default: the model's, or empty)");
  args.option("--eos", "S", "text of eos_token (default: the model's, or empty)");
  args.flag("--no-generation-prompt", "render with add_generation_prompt = false");
  args.option("--now", "\"YYYY-MM-DD HH:MM:SS\"",
              "the time strftime_now() formats (default: the clock), for renderings that must not change by the day");
  if (!args.parse(argc, argv)) return args.exit_code();
  if (args.has("--model") == args.has("--template")) return args.usage_error("give exactly one of -m and --template");
  auto messages_path = args.get("--messages");
  if (!messages_path) return args.usage_error("--messages is required");
  chat::RenderOptions options;
  if (auto now = args.get("--now")) {
    options.now = parse_now(*now);
    if (!options.now) return args.usage_error("--now \"" + *now + "\" is not \"YYYY-MM-DD HH:MM:SS\" or \"YYYY-MM-DD\"");
  }

  chat::ChatInput input;
  std::string source, name;
  if (auto model = args.get("--model")) {
    auto m = model_template(*model);
    if (!m.ok()) return fail_with(m.error().message);
    source = m->source;
    input.bos_token = m->bos;
    input.eos_token = m->eos;
    name = *model;
  } else {
    name = *args.get("--template");
    auto text = read_text_file(name);
    if (!text.ok()) return fail_with(text.error().message);
    source = std::move(*text);
  }
  if (auto b = args.get("--bos")) input.bos_token = *b;
  if (auto e = args.get("--eos")) input.eos_token = *e;

  auto text = read_text_file(*messages_path);
  if (!text.ok()) return fail_with(text.error().message);
  ojson doc;
  try {
    doc = ojson::parse(*text);
  } catch (const ojson::parse_error& e) {
    return fail_with(*messages_path + ": invalid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  }
  // Checked before the document is copied or converted: both recurse once a level.
  if (const size_t depth = chat::json_depth(doc); depth > chat::kMaxJsonDepth)
    return fail_with(*messages_path + ": JSON nested " + std::to_string(depth) + " levels deep, deeper than the " +
                     std::to_string(chat::kMaxJsonDepth) + " a conversation may have");
  if (doc.is_array()) {
    input.messages = std::move(doc);
  } else if (doc.is_object() && doc.contains("messages") && doc["messages"].is_array()) {
    input.messages = std::move(doc["messages"]);
    doc.erase("messages");
    if (auto it = doc.find("add_generation_prompt"); it != doc.end() && it->is_boolean()) {
      input.add_generation_prompt = it->get<bool>();
      doc.erase(it);
    }
    // Tokens given on the command line win over the file's.
    if (args.has("--bos")) doc.erase("bos_token");
    if (args.has("--eos")) doc.erase("eos_token");
    input.extra = std::move(doc);
  } else {
    return fail_with(*messages_path + ": expected a JSON array of messages or an object with a \"messages\" array");
  }
  if (args.has("--no-generation-prompt")) input.add_generation_prompt = false;

  auto tpl = chat::Template::parse(source, name);
  if (!tpl.ok()) return fail_with(tpl.error().message);
  auto out = chat::render_chat(*tpl, input, options);
  if (!out.ok()) return fail_with(out.error().message);
  std::fwrite(out->data(), 1, out->size(), stdout);
  return 0;  // main's finish_stdout says whether it reached stdout
}

}  // namespace df::cli
