#include "cli/compute_backend.h"

#include <chrono>
#include <cstdio>

#include "diskformer/util/size.h"

#ifdef DISKFORMER_HAVE_CUDA
#include "diskformer/backend/cuda/gpu_decoder.h"
#include "diskformer/backend/cuda/gpu_load.h"
#include "diskformer/backend/cuda/pinned.h"
#include "diskformer/backend/cuda_device.h"
#endif

namespace df::cli {

std::optional<std::string> choose_backend(const char* command, const Args& args) {
  const auto asked = args.get("--backend");
  if (asked && *asked != "cuda") return *asked;
#ifdef DISKFORMER_HAVE_CUDA
  const auto dev = cuda::query_devices();
  if (dev.count > 0) return "cuda";
  if (asked) {
    std::fprintf(stderr, "diskformer %s: --backend cuda: no CUDA device (%s)\n", command, dev.why_none.c_str());
    return std::nullopt;
  }
#else
  if (asked) {  // model_options refuses it first; kept so that this function alone is never wrong
    std::fprintf(stderr, "diskformer %s: --backend cuda: this build has no CUDA backend (configure with %s)\n",
                 command, "-DDISKFORMER_CUDA=ON");
    return std::nullopt;
  }
#endif
  return "cpu";
}

io::HostAllocator* host_allocator_for(const std::string& backend) {
#ifdef DISKFORMER_HAVE_CUDA
  if (backend == "cuda") return &cuda::pinned_host_allocator();
#endif
  return nullptr;
}

std::unique_ptr<engine::Decoder> open_decoder(const char* command, const std::string& backend, engine::Model& model,
                                              const DecoderOptions& o) {
  if (backend != "cuda") return std::make_unique<engine::CpuDecoder>(model);
#ifndef DISKFORMER_HAVE_CUDA
  std::fprintf(stderr, "diskformer %s: --backend cuda: this build has no CUDA backend\n", command);
  return nullptr;
#else
  const auto dev = cuda::query_devices();
  if (dev.count == 0) {
    std::fprintf(stderr, "diskformer %s: --backend cuda: no CUDA device (%s)\n", command, dev.why_none.c_str());
    return nullptr;
  }
  auto failed = [&](const std::string& why) -> std::unique_ptr<engine::Decoder> {
    if (!o.cpu_fallback) {
      std::fprintf(stderr, "diskformer %s: %s\n", command, why.c_str());
      return nullptr;
    }
    if (!o.quiet) std::fprintf(stderr, "diskformer %s: %s; running on the CPU\n", command, why.c_str());
    return std::make_unique<engine::CpuDecoder>(model);
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto load = cuda::load_gpu_model(model, {.budget = o.gpu_budget, .n_ctx = model.n_ctx(), .max_batch = 512});
  if (!load.ok()) return failed(load.error().message);
  const double upload_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string residency = load->describe();
  std::shared_ptr<const cuda::GpuModel> shared = std::move(load->model);
  const uint64_t weight_bytes = shared->device_bytes();
  // The decode step replays a captured graph; prompts multiply the routed experts grouped by expert (both give the
  // plain launches' logits bit for bit, tests/gpu). Streamed experts: decode lets the CPU compute the missed
  // experts it finishes sooner than their copies (measured in bench: 41.8 -> 49.4 tok/s at a 1.8 GiB budget).
  auto d = cuda::GpuDecoder::create(std::move(shared), {.n_ctx = model.n_ctx(), .max_batch = 512,
                                                        .decode_graph = true, .grouped_experts = true,
                                                        .cpu_experts = load->slots && o.cpu_experts ? &model.context() : nullptr});
  if (!d.ok()) return failed(d.error().message);
  if (!o.quiet)
    std::fprintf(stderr, "diskformer %s: backend cuda on %s, %s of weights uploaded in %.1f s; %s\n", command,
                 dev.name.c_str(), format_size(weight_bytes).c_str(), upload_s, residency.c_str());
  return std::move(d).value();
#endif
}

std::string backend_stats(engine::Decoder& decoder) {
  const engine::DecoderStats s = decoder.stats();
  std::string out = "backend " + s.backend;
  if (!s.device.empty()) out += " (" + s.device + ")";
  if (s.device_bytes) out += ", GPU memory " + format_size(*s.device_bytes) + " held by this run";
  if (s.device_used_peak)
    out += ", " + format_size(*s.device_used_peak) + " in use on the device (driver-reported peak)";
  if (s.expert_hit_rate) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ", GPU expert cache hit rate %.1f%%, %s copied to the GPU",
                  100.0 * *s.expert_hit_rate, format_size(s.bytes_to_device.value_or(0)).c_str());
    out += buf;
  }
  return out;
}

}  // namespace df::cli
