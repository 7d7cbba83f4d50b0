// Options the engine commands (run, chat, bench) share: the model, context, threads, RAM budget, backend, and
// sampling; parsed the same way everywhere.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "diskformer/engine/generate.h"
#include "diskformer/engine/model.h"

namespace df::cli {

void add_model_options(Args& args);      // -m, -c, -t, --ram-budget, --gpu-budget, --backend
void add_sampling_options(Args& args);   // -n, --temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed, --ignore-eos

// nullopt after a usage error (already printed; args.exit_code() says 2). --backend cuda is accepted only where the
// command can run it (allow_cuda) and the build has the CUDA backend; the caller reads the choice with backend().
std::optional<engine::ModelOptions> model_options(Args& args, bool allow_cuda = false);
std::string backend(const Args& args);
// --gpu-budget in bytes; nullopt when absent (model_options has already refused a value that does not parse).
std::optional<uint64_t> gpu_budget(const Args& args);
// --cpu-experts: streamed decode shares its missed experts with the CPU (on unless "off"; model_options checks it).
bool cpu_experts(const Args& args);
std::optional<engine::GenerateOptions> generate_options(Args& args, int32_t default_n_predict);

// Opens the model, printing the failure as one line; nullptr on failure.
std::unique_ptr<engine::Model> open_model(const char* command, const std::string& path,
                                          const engine::ModelOptions& options, bool quiet);

// "prompt 12 tok (210.5 tok/s), decode 32 tok (45.1 tok/s), disk 10.9 MiB read, expert cache hit rate 93.8%,
//  peak RSS 48.2 MiB"
std::string stats_line(engine::Model& model, const engine::GenerateStats& st);

}  // namespace df::cli
