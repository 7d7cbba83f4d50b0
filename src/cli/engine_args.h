// Options the engine commands (run, chat, bench, routing) share: the model, context, threads, budgets, backend and
// sampling; parsed the same way everywhere.
#pragma once

#include <optional>
#include <string>

#include "cli/args.h"
#include "diskformer/engine/generate.h"
#include "diskformer/engine/model.h"
#include "diskformer/tokenizer/tokenizer.h"

namespace df::cli {

// What the help of -m .. --backend says where commands differ.
struct ModelOptionsHelp {
  bool gpu = true;                                   // --gpu-budget, --cpu-experts, --expert-prefetch, --backend
  const char* ctx_default = "the model's, at most 4096";  // the -c a command takes when none is given
};
// -m, -hf, -hff, --store, -c, -t, --ram-budget; with gpu: --gpu-budget, --cpu-experts, --expert-prefetch, --backend
void add_model_options(Args& args, const ModelOptionsHelp& help = {});
// -n (default_n_predict as the help says it), --temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed,
// --ignore-eos
void add_sampling_options(Args& args, int32_t default_n_predict);

// What the model is read from: the store (--store DIR, or -m DIR), else -m (a URL, and -hf, fetched into the cache
// first: fetch.h). With both -m FILE and --store DIR the store must still match the file (size, mtime, header):
// refused otherwise. nullopt after an error (printed; the
// exit code is in args for a usage error, 1 otherwise: exit_code() stays 0).
std::optional<std::string> model_path(Args& args);

// nullopt after a usage error (already printed; args.exit_code() says 2). --backend cuda is accepted only where the
// command can run it (allow_cuda) and the build has the CUDA backend; the backend itself is chosen by
// choose_backend (compute_backend.h).
std::optional<engine::ModelOptions> model_options(Args& args, bool allow_cuda = false);
std::optional<engine::GenerateOptions> generate_options(Args& args, int32_t default_n_predict);
// llama.cpp drops --ignore-eos, with a warning, where the vocabulary has no EOS token; so does this.
void check_ignore_eos(const Args& args, const tokenizer::Tokenizer& tok, engine::GenerateOptions& options);

}  // namespace df::cli
