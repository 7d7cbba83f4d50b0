// The compute backend of run and chat: --backend cpu|cuda, or by default CUDA where the build has the CUDA backend
// and a GPU is present (else the CPU, silently); and the decoder that generation drives on it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "diskformer/engine/decoder.h"
#include "diskformer/engine/model.h"

namespace df::cli {

// --backend as given (model_options has checked the name), else "cuda" where available, else "cpu". nullopt after
// printing one line (exit 1) when cuda is asked for and no device can run it, before any model is read.
std::optional<std::string> choose_backend(const char* command, const Args& args);

// The CPU engine's session, or the model uploaded to the GPU with a session there. nullptr after printing one line
// (exit 1): no CUDA device, a model the GPU cannot hold (with the sizes). With cpu_fallback (cuda was the default,
// not asked for) a GPU that cannot hold the model logs why and the CPU runs it instead.
std::unique_ptr<engine::Decoder> open_decoder(const char* command, const std::string& backend, engine::Model& model,
                                              bool quiet, bool cpu_fallback);

// "backend cpu" or "backend cuda (NVIDIA H200), GPU memory 1.2 GiB held by this run, 2.0 GiB in use on the device
// (driver-reported peak)": the start of the stats line.
std::string backend_stats(engine::Decoder& decoder);

}  // namespace df::cli
