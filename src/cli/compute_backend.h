// The compute backend of the engine commands: --backend cpu|cuda, or by default CUDA where the build has the CUDA
// backend and a GPU is present (else the CPU, silently); and the model opened on it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "diskformer/engine/model.h"
#include "diskformer/engine/session.h"

namespace df::cli {

// --backend as given (model_options has checked the name), else cuda where available, else cpu. nullopt after
// printing one line (exit 1) when cuda is asked for and no device can run it, before any model is read.
std::optional<engine::Backend> choose_backend(const char* command, const Args& args);

// Opens the model on options.backend, printing a failure as one line (nullptr). With cpu_fallback (cuda was the
// default, not asked for), a model the GPU cannot run logs why and opens on the CPU instead.
std::unique_ptr<engine::Model> open_model(const char* command, const std::string& path,
                                          const engine::ModelOptions& options, bool quiet, bool cpu_fallback = false);

// A session of the model, or nullptr after printing why.
std::optional<engine::Session> open_session(const char* command, engine::Model& model);

// "backend cpu" or "backend cuda (NVIDIA H200), GPU memory 1.2 GiB held by this run, 2.0 GiB in use on the device
// (driver-reported peak), GPU expert cache hit rate 93.1%, 1.2 GiB copied to the GPU": the start of the stats line.
std::string backend_stats(engine::Model& model, engine::Session& session);

}  // namespace df::cli
