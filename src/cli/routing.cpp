// diskformer routing -m MODEL (-f FILE | -p TEXT) [-c N] [--max-tokens N] [--json]: where a MoE model's routers
// send the tokens of a text: per layer, how evenly its experts are used and how often a token reuses the experts of
// the token before it.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/text_file.h"
#include "cli/compute_backend.h"
#include "cli/engine_args.h"
#include "diskformer/model/routing_stats.h"
#include "diskformer/tokenizer/tokenizer.h"

namespace df::cli {

int cmd_routing(int argc, char** argv) {
  Args args("routing", "-m MODEL|--store DIR (-f FILE | -p TEXT) [-c N] [--max-tokens N] [-t N] [--json]");
  add_model_options(args, {.gpu = false, .ctx_default = "512"});
  args.option("-p,--prompt", "TEXT", "text to route");
  args.option("-f,--file", "PATH", "read the text from a file");
  args.option("--max-tokens", "N", "route at most N tokens of the text (default 8192)");
  args.flag("--json", "one JSON object on stdout");
  args.flag("--quiet", "no logs");
  if (!args.parse(argc, argv)) return args.exit_code();
  if (args.has("--prompt") == args.has("--file")) return args.usage_error("give the text with -p or -f");
  auto max_tokens = args.get_int("--max-tokens", 8192, 2, INT32_MAX);
  if (!max_tokens) return args.exit_code();
  auto mo = model_options(args);
  if (!mo) return args.exit_code();
  if (mo->n_ctx == 0) mo->n_ctx = 512;
  const auto path = model_path(args);
  if (!path) return args.exit_code() ? args.exit_code() : 1;

  std::string text;
  if (auto f = args.get("--file")) {
    auto read = read_text_file(*f);
    if (!read) {
      std::fprintf(stderr, "diskformer routing: %s\n", read.error().message.c_str());
      return 1;
    }
    text = std::move(*read);
  } else {
    text = *args.get("--prompt");
  }

  auto model = open_model("routing", *path, *mo, args.has("--quiet"));
  if (!model) return 1;
  const auto& spec = model->spec();
  if (!spec.moe()) {
    std::fprintf(stderr, "diskformer routing: %s: not a mixture-of-experts model (no routed experts)\n", path->c_str());
    return 1;
  }
  auto tok = tokenizer::Tokenizer::from_gguf(model->file());
  if (!tok) {
    std::fprintf(stderr, "diskformer routing: %s\n", tok.error().message.c_str());
    return 1;
  }
  std::vector<int32_t> ids = tok->encode(text);
  if (ids.size() > size_t(*max_tokens)) ids.resize(size_t(*max_tokens));

  // The text in windows of the context length, each a fresh sequence.
  model::RoutingStats stats(spec.n_layer, spec.n_expert, spec.n_expert_used);
  for (size_t at = 0; at < ids.size(); at += model->n_ctx()) {
    const size_t n = std::min<size_t>(model->n_ctx(), ids.size() - at);
    auto s = open_session("routing", *model);
    if (!s) return 1;
    s->set_routing_stats(&stats);
    if (auto st = s->eval(std::span<const int32_t>(ids.data() + at, n)); !st) {
      std::fprintf(stderr, "diskformer routing: %s\n", st.error().message.c_str());
      return 1;
    }
    stats.break_sequence();
  }

  const double random_reuse = double(spec.n_expert_used) / double(spec.n_expert);
  nlohmann::json layers = nlohmann::json::array();
  for (uint32_t l = 0; l < spec.n_layer; ++l) {
    if (stats.tokens(l) == 0) continue;
    std::vector<double> shares(spec.n_expert);
    for (uint32_t e = 0; e < spec.n_expert; ++e) shares[e] = stats.share(l, e);
    const auto mx = std::max_element(shares.begin(), shares.end());
    const auto mn = std::min_element(shares.begin(), shares.end());
    layers.push_back({{"layer", l},
                      {"evenness", stats.evenness(l)},
                      {"max_share", *mx},
                      {"max_expert", mx - shares.begin()},
                      {"min_share", *mn},
                      {"min_expert", mn - shares.begin()},
                      {"reuse", stats.reuse(l)},
                      {"shares", shares}});
  }
  const std::string name = std::filesystem::path(*path).filename().string();
  if (args.has("--json")) {
    nlohmann::json j = {{"model", name},           {"tokens", ids.size()},         {"n_expert", spec.n_expert},
                        {"n_expert_used", spec.n_expert_used}, {"random_reuse", random_reuse}, {"layers", layers}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s: %zu tokens routed, %u experts, top-%u; even use is a share of %.4f each, and random routing "
              "reuses %.3f of the previous token's experts\n",
              name.c_str(), ids.size(), spec.n_expert, spec.n_expert_used, 1.0 / spec.n_expert, random_reuse);
  std::printf("%6s %9s %18s %18s %7s\n", "layer", "evenness", "most used (share)", "least used (share)", "reuse");
  for (const auto& l : layers)
    std::printf("%6u %9.3f %8lld (%.4f) %9lld (%.4f) %7.3f\n", l["layer"].get<unsigned>(), l["evenness"].get<double>(),
                (long long)l["max_expert"].get<int64_t>(), l["max_share"].get<double>(),
                (long long)l["min_expert"].get<int64_t>(), l["min_share"].get<double>(), l["reuse"].get<double>());
  return 0;
}

}  // namespace df::cli
