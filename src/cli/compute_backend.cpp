#include "cli/compute_backend.h"

#include <chrono>
#include <cstdio>

#include "cli/load_progress.h"
#include "diskformer/util/size.h"

#ifdef DISKFORMER_HAVE_CUDA
#include "diskformer/cudart/devices.h"
#endif

namespace df::cli {

namespace {

// The options only a CUDA run reads: given to a CPU run they change nothing, which is worth saying.
engine::Backend on_cpu(const Args& args) {
  for (const char* name : {"--gpu-budget", "--cpu-experts", "--expert-prefetch"})
    if (args.has(name)) args.warn(std::string(name) + " applies to the CUDA backend only: the CPU backend ignores it");
  return engine::Backend::kCpu;
}

}  // namespace

std::optional<engine::Backend> choose_backend(const char* command, const Args& args) {
  const auto asked = args.get("--backend");
  if (asked && *asked != "cuda") return on_cpu(args);
#ifdef DISKFORMER_HAVE_CUDA
  const auto dev = cuda::query_devices();
  if (dev.count > 0) return engine::Backend::kCuda;
  if (asked) {
    std::fprintf(stderr, "diskformer %s: --backend cuda: no CUDA device (%s)\n", command, dev.why_none.c_str());
    return std::nullopt;
  }
  // A GPU is there but cannot run this build: say so once, rather than leave the user wondering why it sits idle.
  if (dev.visible > 0)
    std::fprintf(stderr, "diskformer %s: the GPU is not used (%s); running on the CPU\n", command,
                 dev.why_none.c_str());
#else
  if (asked) {  // model_options refuses it first; kept so that this function alone is never wrong
    std::fprintf(stderr, "diskformer %s: --backend cuda: this build has no CUDA backend (configure with %s)\n",
                 command, "-DDISKFORMER_CUDA=ON");
    return std::nullopt;
  }
#endif
  return on_cpu(args);
}

std::unique_ptr<engine::Model> open_model(const char* command, const std::string& path,
                                          const engine::ModelOptions& options, bool quiet, bool cpu_fallback) {
  const auto t0 = std::chrono::steady_clock::now();
  LoadProgress bar(command, progress_wanted(quiet));
  engine::ModelOptions with_bar = options;
  with_bar.progress = bar.callback();
  auto m = engine::Model::open(path, with_bar);
  bar.finish();
  if (!m.ok() && options.backend == engine::Backend::kCuda && cpu_fallback) {
    if (!quiet) std::fprintf(stderr, "diskformer %s: %s; running on the CPU\n", command, m.error().message.c_str());
    engine::ModelOptions cpu = options;
    cpu.backend = engine::Backend::kCpu;
    return open_model(command, path, cpu, quiet, false);
  }
  if (!m.ok()) {
    std::fprintf(stderr, "diskformer %s: %s\n", command, m.error().message.c_str());
    return nullptr;
  }
  const uint32_t trained = (*m)->spec().n_ctx_train;
  if (trained > 0 && (*m)->n_ctx() > trained)
    std::fprintf(stderr,
                 "diskformer %s: warning: -c %u is beyond the %u positions the model was trained on; what it "
                 "generates past them may make little sense\n",
                 command, (*m)->n_ctx(), trained);
  if (!quiet) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& spec = (*m)->spec();
    std::fprintf(stderr, "diskformer %s: %s%s, %s, %u layers, d=%u, backend %s, %u threads, kernels %s, context %u, "
                 "opened in %.1f s\n",
                 command, path.c_str(), (*m)->files().from_store ? " (store)" : "", model::family_name(spec.family),
                 spec.n_layer, spec.n_embd, engine::backend_name((*m)->backend()), (*m)->threads(),
                 (*m)->context().kernels->name, (*m)->n_ctx(), s);
    std::fprintf(stderr, "diskformer %s: %s\n", command, (*m)->describe().c_str());
  }
  return std::move(m).value();
}

std::optional<engine::Session> open_session(const char* command, engine::Model& model) {
  auto s = engine::Session::create(model);
  if (!s.ok()) {
    std::fprintf(stderr, "diskformer %s: %s\n", command, s.error().message.c_str());
    return std::nullopt;
  }
  return std::move(s).value();
}

std::string backend_stats(engine::Model& model, engine::Session& session) {
  const engine::SessionStats s = session.stats();
  std::string out = "backend " + s.backend;
  if (!s.device.empty()) out += " (" + s.device + ")";
  if (s.device_bytes) out += ", GPU memory " + format_size(*s.device_bytes) + " held by this run";
  if (s.device_used_peak)
    out += ", " + format_size(*s.device_used_peak) + " in use on the device (driver-reported peak)";
  const engine::ModelStats m = model.stats();
  if (m.gpu) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ", GPU expert cache hit rate %.1f%%, %s copied to the GPU",
                  100.0 * m.gpu->cache.hit_rate(), format_size(m.gpu->cache.bytes_loaded).c_str());
    out += buf;
  }
  return out;
}

}  // namespace df::cli
