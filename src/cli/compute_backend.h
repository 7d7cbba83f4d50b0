// The compute backend of run and chat: --backend cpu|cuda, or by default CUDA where the build has the CUDA backend
// and a GPU is present (else the CPU, silently); and the decoder that generation drives on it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "diskformer/io/buffer.h"
#include "diskformer/engine/decoder.h"
#include "diskformer/engine/model.h"

namespace df::cli {

// --backend as given (model_options has checked the name), else "cuda" where available, else "cpu". nullopt after
// printing one line (exit 1) when cuda is asked for and no device can run it, before any model is read.
std::optional<std::string> choose_backend(const char* command, const Args& args);

// The host allocator for the weights of a run on `backend`: pinned memory on CUDA (uploads and streamed experts
// cross the link at its speed), nullptr (the default) on the CPU.
io::HostAllocator* host_allocator_for(const std::string& backend);

struct DecoderOptions {
  bool quiet = false;
  // cuda was the default, not asked for: a GPU that cannot hold the model logs why and the CPU runs it instead.
  bool cpu_fallback = false;
  std::optional<uint64_t> gpu_budget;  // --gpu-budget: the routed experts stream through a GPU cache within it
  bool cpu_experts = true;             // --cpu-experts: streamed decode shares its misses with the CPU
};

// The CPU engine's session, or the model put on the GPU (cuda::load_gpu_model: all resident, or experts streamed
// under a budget) with a session there; the host model must outlive it. nullptr after printing one line (exit 1): no
// CUDA device, a model the GPU cannot hold or a budget too small (with the sizes).
std::unique_ptr<engine::Decoder> open_decoder(const char* command, const std::string& backend, engine::Model& model,
                                              const DecoderOptions& options);

// "backend cpu" or "backend cuda (NVIDIA H200), GPU memory 1.2 GiB held by this run, 2.0 GiB in use on the device
// (driver-reported peak)": the start of the stats line.
std::string backend_stats(engine::Decoder& decoder);

}  // namespace df::cli
