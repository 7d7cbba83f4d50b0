// diskformer synth --arch A [--preset P] --type T --tokenizer-from GGUF [--seed N] -o OUT
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/partial_file.h"
#include "diskformer/synth/synth.h"
#include "diskformer/util/size.h"

namespace df::cli {

int cmd_synth(int argc, char** argv) {
  Args args("synth", "--arch qwen3moe|qwen3|llama|gemma4|qwen35moe [--preset NAME] --type TYPE|MIX "
                     "--tokenizer-from FILE.gguf [--seed N] -o OUT.gguf");
  args.option("--arch", "ARCH", "architecture: qwen3moe, qwen3, llama, gemma4 or qwen35moe");
  args.option("--preset", "NAME", "shape (default tiny): qwen3moe tiny|2g|qwen3-30b-a3b, qwen3 tiny|small, "
                                  "llama tiny|mixtral-tiny|small, gemma4 tiny|tiny-e2b|26b-a4b|e2b, "
                                  "qwen35moe tiny|qwen3.6-35b-a3b");
  args.option("--type", "TYPE", "weight type of the matrices: q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, q2_k, q3_k, "
                                "q4_k, q5_k, q6_k, iq4_xs, f16, bf16; or a llama.cpp mix, each tensor typed by its "
                                "quantizer's rules: q2_k, q3_k_m, q4_k_m, q5_k_m, q6_k, iq4_xs");
  args.option("--tokenizer-from", "GGUF", "copy the tokenizer (tokenizer.* metadata) from this GGUF");
  args.option("--seed", "N", "random seed (default 1)");
  args.option("--layers", "N", "override the preset's layer count");
  args.option("-t,--threads", "N", "generator threads (default: all cores)");
  args.option("-o,--output", "OUT", "file to write (written as OUT.partial, renamed when complete)");
  args.flag("--quiet", "no progress");
  if (!args.parse(argc, argv)) return args.exit_code();

  auto arch = args.get("--arch");
  auto type_name = args.get("--type");
  auto tok = args.get("--tokenizer-from");
  auto out = args.get("--output");
  if (!arch || !type_name || !tok || !out) return args.usage_error("--arch, --type, --tokenizer-from and -o are required");
  std::string preset_name = args.get_or("--preset", "tiny");
  auto shape = synth::preset(*arch, preset_name);
  if (!shape) {
    std::string known;
    for (const auto& n : synth::preset_names(*arch)) known += (known.empty() ? "" : ", ") + n;
    if (known.empty())
      return args.usage_error("unknown architecture '" + *arch + "' (qwen3moe, qwen3, llama, gemma4, qwen35moe)");
    return args.usage_error("unknown preset '" + preset_name + "' for " + *arch + " (" + known + ")");
  }
  // A mix name wins where it is also a type's (q2_k, q6_k, iq4_xs: the mix is what llama-quantize writes).
  const auto mix = synth::mix_from_name(*type_name);
  auto type = gguf::type_from_name(*type_name);
  if (!mix && (!type || !synth::supported_type(*type)))
    return args.usage_error("unsupported --type '" + *type_name + "'");
  auto seed = args.get_int("--seed", 1, 0, INT64_MAX);
  auto layers = args.get_int("--layers", shape->n_layer, 1, 100000);
  auto threads = args.get_int("--threads", 0, 0, 1024);
  if (!seed || !layers || !threads) return 2;
  warn_threads(args, *threads);
  shape->n_layer = static_cast<uint32_t>(*layers);

  synth::Options o;
  o.shape = *shape;
  if (type) o.type = *type;
  o.mix = mix;
  o.tokenizer_from = *tok;
  o.seed = static_cast<uint64_t>(*seed);
  o.out = *out;
  o.threads = static_cast<unsigned>(*threads);
  const bool tty = isatty(STDERR_FILENO) && !args.has("--quiet");
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  if (tty)
    o.progress = [&](uint64_t done, uint64_t total) {
      double s = seconds();
      std::fprintf(stderr, "\rsynth: %s / %s  %.0f MB/s  ", format_size(done).c_str(), format_size(total).c_str(),
                   s > 0 ? done / s / 1e6 : 0.0);
    };
  const RemoveOnSignal cleanup(*out + ".partial");  // gguf::Writer's partial file
  Status st = synth::write_model(o);
  if (tty) std::fprintf(stderr, "\n");
  if (!st) {
    std::fprintf(stderr, "diskformer synth: %s\n", st.error().message.c_str());
    return 1;
  }
  if (!args.has("--quiet")) {
    std::fprintf(stderr, "synth: wrote %s (%s %s, %s) in %.1f s\n", out->c_str(), arch->c_str(), preset_name.c_str(),
                 type_name->c_str(), seconds());
  }
  return 0;
}

}  // namespace df::cli
