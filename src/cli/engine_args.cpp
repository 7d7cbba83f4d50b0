#include "cli/engine_args.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>

#include "cli/fetch.h"
#include "diskformer/store/store.h"
#include "diskformer/util/size.h"

namespace df::cli {

void add_model_options(Args& args, const ModelOptionsHelp& help) {
  args.option("-m,--model", "PATH|URL", "GGUF model file (or the first part of a split one), an http(s) URL of one "
              "(fetched into the cache), or a store directory made by ingest");
  add_fetch_options(args);
  args.option("--store", "DIR", "run from this store made by ingest (with -m FILE: checked to still match it)");
  args.option("-c,--ctx-size", "N", std::string("context length (default: ") + help.ctx_default + ")");
  args.option("-t,--threads", "N", "CPU threads (default: physical cores)");
  args.option("--ram-budget", "SIZE", "RAM for the weights, their caches and, on the CPU, the KV cache and work "
              "buffers; the weights stream from disk beyond it");
  if (!help.gpu) return;
  // A build without the CUDA backend takes the CUDA options (scripts run on both) and ignores them with a warning.
#ifdef DISKFORMER_HAVE_CUDA
  const std::string ignored;
  args.option("--backend", "NAME", "cpu or cuda (default: cuda where a GPU is present, else cpu)");
#else
  const std::string ignored = "; this build has no CUDA backend: ignored";
  args.option("--backend", "NAME", "cpu (this build has no CUDA backend)");
#endif
  args.option("--gpu-budget", "SIZE", "on CUDA: GPU memory for the run, CUDA context included; streams experts "
              "beyond it (default: all resident, or for a model larger than the GPU, the GPU's memory less 5%)" +
              ignored);
  args.option("--cpu-experts", "auto|on|off", "with --gpu-budget on CUDA: decode computes the missed experts the CPU "
              "finishes sooner than their copies to the GPU (default auto: where the CPU rounds those experts' "
              "products as the GPU does, so the output stays the resident run's: every type, the K-quants and "
              "IQ4_XS in the GPU's own order)" +
              ignored);
  args.option("--expert-prefetch", "on|off", "with --gpu-budget on CUDA: decode copies the next layer's guessed "
              "experts to the GPU ahead of their use, as many as fit in the link's idle time (default off)" + ignored);
}

void add_sampling_options(Args& args, int32_t default_n_predict) {
  args.option("-n,--n-predict", "N", "tokens to generate (default " + std::to_string(default_n_predict) +
              "; -1: until end of generation or a full context)");
  args.option("--temp", "T", "temperature; 0 is greedy (default 0.8)");
  args.option("--top-k", "K", "keep the K most likely tokens (default 40, 0 = all)");
  args.option("--top-p", "P", "keep the smallest set with probability >= P (default 0.95, 1 = off)");
  args.option("--min-p", "P", "drop tokens below P x the top probability (default 0.05, 0 = off)");
  args.option("--repeat-penalty", "R", "penalize the last 64 tokens (default 1.0 = off)");
  args.option("--seed", "S", "random seed, 0 or more (default -1: random)");
  args.flag("--ignore-eos", "never choose an end-of-generation token (a logit of -inf, as llama.cpp), so that "
            "generation goes on to -n");
}

std::optional<std::string> model_path(Args& args) {
  const auto dir = args.get("--store");
  if (!args.has("--model") && !args.has("--hf-repo") && !dir) {
    args.usage_error("-m MODEL (or -hf ORG/REPO, or --store DIR) is required");
    return std::nullopt;
  }
  const auto m = fetched_model(args);
  if (args.exit_code() || (!m && (args.has("--model") || args.has("--hf-repo")))) return std::nullopt;
  if (!dir) return *m;
  if (m) {  // the store must be of this file, as it is now
    auto s = store::Store::open(*dir, {.source = *m});
    if (!s.ok()) {
      std::fprintf(stderr, "diskformer: %s\n", s.error().message.c_str());
      return std::nullopt;
    }
  }
  return *dir;
}

std::optional<engine::ModelOptions> model_options(Args& args, bool allow_cuda) {
  engine::ModelOptions o;
  auto ctx = args.get_int("--ctx-size", 0, 0, 1 << 24);
  auto threads = args.get_int("--threads", 0, 0, 1024);
  auto budget = args.get_size("--ram-budget");
  auto gpu = args.get_size("--gpu-budget");
  if (!ctx || !threads || !budget || !gpu) return std::nullopt;
  warn_threads(args, *threads);
#ifdef DISKFORMER_HAVE_CUDA
  const bool cuda_built = true;
#else
  const bool cuda_built = false;
#endif
  const std::string b = args.get_or("--backend", "cpu");
  if (b == "cuda" && allow_cuda && !cuda_built) {
    args.usage_error("--backend cuda: this build has no CUDA backend (configure with -DDISKFORMER_CUDA=ON)");
    return std::nullopt;
  }
  if (b != "cpu" && !(b == "cuda" && allow_cuda && cuda_built)) {
    args.usage_error("--backend " + b + " is not available in this command" +
                     (allow_cuda && cuda_built ? " (supported: cpu, cuda)" : " (supported: cpu)"));
    return std::nullopt;
  }
  const std::string c = args.get_or("--cpu-experts", "auto"), pf = args.get_or("--expert-prefetch", "off");
  if (c != "auto" && c != "on" && c != "off") {
    args.usage_error("--cpu-experts takes auto, on or off, got " + c);
    return std::nullopt;
  }
  if (pf != "on" && pf != "off") {
    args.usage_error("--expert-prefetch takes on or off, got " + pf);
    return std::nullopt;
  }
  o.n_ctx = uint32_t(*ctx);
  o.threads = int(*threads);
  o.ram_budget = *budget;
  o.gpu.budget = *gpu;
  if (c != "auto") o.gpu.cpu_experts = c == "on";
  o.gpu.prefetch = pf == "on";
  return o;
}

std::optional<engine::GenerateOptions> generate_options(Args& args, int32_t default_n_predict) {
  engine::GenerateOptions g;
  constexpr double kNoMax = HUGE_VAL;
  auto n = args.get_int("--n-predict", default_n_predict, -1, INT32_MAX);
  auto temp = args.get_double("--temp", 0.8, 0, kNoMax);
  auto top_k = args.get_int("--top-k", 40, 0, INT32_MAX);
  auto top_p = args.get_double("--top-p", 0.95, 0, 1);
  auto min_p = args.get_double("--min-p", 0.05, 0, 1);
  auto rp = args.get_double("--repeat-penalty", 1.0, 0, kNoMax);
  auto seed = args.get_int("--seed", -1, -1, INT64_MAX);  // -1: a random seed
  if (!n || !temp || !top_k || !top_p || !min_p || !rp || !seed) return std::nullopt;
  if (*rp <= 0) {
    args.usage_error("option --repeat-penalty expects a positive number, got " + *args.get("--repeat-penalty"));
    return std::nullopt;
  }
  g.n_predict = int32_t(*n);
  g.ignore_eos = args.has("--ignore-eos");
  g.sampling.temp = float(*temp);
  g.sampling.top_k = int32_t(*top_k);
  g.sampling.top_p = float(*top_p);
  g.sampling.min_p = float(*min_p);
  g.sampling.repeat_penalty = float(*rp);
  g.sampling.seed = *seed < 0 ? std::random_device{}() : uint64_t(*seed);
  return g;
}

void check_ignore_eos(const Args& args, const tokenizer::Tokenizer& tok, engine::GenerateOptions& options) {
  if (!options.ignore_eos || tok.eos() != tokenizer::kNoToken) return;
  args.warn("--ignore-eos: the vocabulary has no EOS token, so end-of-generation tokens end generation (as in "
            "llama.cpp)");
  options.ignore_eos = false;
}

}  // namespace df::cli
