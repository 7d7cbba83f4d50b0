#include "cli/bench_cuda.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "cli/bench_stats.h"
#include "diskformer/util/size.h"

#ifdef DISKFORMER_HAVE_CUDA
#include <cuda_runtime.h>

#include "diskformer/backend/cuda/gpu_forward.h"
#include "diskformer/backend/cuda/gpu_load.h"
#include "diskformer/backend/cuda/pinned.h"
#include "diskformer/backend/cuda_device.h"
#include "diskformer/engine/generate.h"
#endif

namespace df::cli {

#ifndef DISKFORMER_HAVE_CUDA

int bench_cuda(engine::Model&, const BenchCudaArgs&) {
  std::fprintf(stderr, "diskformer bench: this build has no CUDA backend (configure with -DDISKFORMER_CUDA=ON)\n");
  return 1;
}

io::HostAllocator* cuda_host_allocator() { return nullptr; }

#else

io::HostAllocator* cuda_host_allocator() { return &cuda::pinned_host_allocator(); }

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Device memory in use as the driver reports it (every process's allocations and contexts, as nvidia-smi counts),
// sampled between phases; the peak of the samples.
struct GpuMemPeak {
  uint64_t peak = 0;
  void sample() { peak = std::max(peak, cuda::device_memory_used()); }
};

struct Rep {
  double prefill_s = 0, decode_s = 0;
  uint64_t cpu_experts = 0;  // streamed experts the CPU computed
};

Result<Rep> one_rep(const cuda::GpuModel& gpu, uint32_t n_ctx, uint32_t max_batch, int64_t p, int64_t n,
                    std::mt19937& rng, GpuMemPeak& mem, cpu::Context* cpu_experts) {
  DF_ASSIGN(auto s,
            cuda::GpuSession::create(gpu, {.n_ctx = n_ctx, .max_batch = max_batch, .cpu_experts = cpu_experts}));
  std::uniform_int_distribution<int32_t> tok(0, int32_t(gpu.spec().n_vocab) - 1);
  std::vector<int32_t> prompt(size_t(std::max<int64_t>(p, 1)));
  for (auto& t : prompt) t = tok(rng);
  Rep r;
  auto t0 = Clock::now();
  DF_TRY(s->eval(prompt));
  int32_t next = s->argmax();  // waits for the device
  r.prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  mem.sample();
  t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {  // greedy decode: each step feeds the previous choice back
    DF_TRY(s->eval(std::span<const int32_t>(&next, 1)));
    next = s->argmax();
  }
  r.decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.cpu_experts = s->cpu_experts_computed();
  mem.sample();
  return r;
}

json opt_size(const std::optional<uint64_t>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

int bench_cuda(engine::Model& host, const BenchCudaArgs& a) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "diskformer bench: %s\n", m.c_str());
    return 1;
  };
  auto dev = cuda::query_devices();
  if (dev.count == 0) return fail("--backend cuda: no CUDA device (" + dev.why_none + ")");
  GpuMemPeak mem;
  const auto t_up = Clock::now();
  auto load = cuda::load_gpu_model(host, {.budget = a.gpu_budget, .n_ctx = host.n_ctx(), .max_batch = a.max_batch});
  if (!load) return fail(load.error().message);
  const cuda::GpuModel& gpu = *load->model;
  cuda::GpuExpertCache* cache = gpu.expert_cache();
  const double upload_s = std::chrono::duration<double>(Clock::now() - t_up).count();
  mem.sample();
  const std::string residency = load->describe();
  if (!a.quiet)
    std::fprintf(stderr, "diskformer bench: %s on %s, %s of weights uploaded in %.1f s; %s\n", a.path.c_str(),
                 dev.name.c_str(), format_size(gpu.device_bytes()).c_str(), upload_s, residency.c_str());
  std::mt19937 rng(1234);
  cpu::Context* cpu_experts = a.cpu_experts && cache ? &host.context() : nullptr;
  // The warm-up runs the first configuration's whole prompt: kernel modules load and cuBLAS starts on first use,
  // which the first timed prefill would otherwise pay (with a budget it also warms the expert cache, as on the CPU).
  const int64_t warm_p = std::max<int64_t>(1, std::min<int64_t>(a.prompts.front(), int64_t(host.n_ctx()) - 4));
  if (auto warm = one_rep(gpu, host.n_ctx(), a.max_batch, warm_p, 4, rng, mem, cpu_experts); !warm)
    return fail(warm.error().message);
  for (int64_t p : a.prompts)
    for (int64_t n : a.gens) {
      if (uint64_t(p + n) > host.n_ctx())
        return fail("-p " + std::to_string(p) + " + -n " + std::to_string(n) + " exceeds the context " +
                    std::to_string(host.n_ctx()) + " (-c)");
      if (cache) cache->reset_stats();
      host.weights().reset_stream_stats();
      std::vector<double> pre, dec;
      double timed_s = 0;
      uint64_t cpu_count = 0;
      for (int64_t r = 0; r < a.reps; ++r) {
        auto rep = one_rep(gpu, host.n_ctx(), a.max_batch, p, n, rng, mem, cpu_experts);
        if (!rep) return fail(rep.error().message);
        if (p > 0) pre.push_back(double(p) / rep->prefill_s);
        if (n > 0) dec.push_back(double(n) / rep->decode_s);
        timed_s += rep->prefill_s + rep->decode_s;
        cpu_count += rep->cpu_experts;
      }
      const Summary sp = summarize(pre), sd = summarize(dec);
      json j = {{"model", std::filesystem::path(a.path).filename().string()},
                {"model_bytes", a.model_bytes},
                {"backend", "cuda"},
                {"gpu", dev.name},
                {"gpu_budget", opt_size(a.gpu_budget)},
                {"ram_budget", opt_size(a.ram_budget)},
                {"threads", host.threads()},
                {"prompt_tokens", p},
                {"gen_tokens", n},
                {"reps", a.reps},
                {"batch", a.max_batch},
                {"prefill_tok_s", summary_json(sp, p > 0)},
                {"decode_tok_s", summary_json(sd, n > 0)},
                {"gpu_mem_peak_bytes", mem.peak},
                {"gpu_weight_bytes", gpu.device_bytes()},
                {"rss_peak_bytes", engine::peak_rss_bytes()},
                {"expert_hit_rate", nullptr},
                {"bytes_from_ram", nullptr},
                {"bytes_from_disk", nullptr},
                {"h2d_GBps", nullptr},
                {"disk_GBps", nullptr},
                {"residency", residency},
                {"upload_s", upload_s}};
      if (cache) {
        const cuda::ExpertCacheStats cs = cache->stats();
        const engine::DiskStats ds = host.weights().stats();
        j["gpu_slots"] = cache->slots();
        // Of all expert uses: found in the GPU cache (the CPU's share counts as not found).
        const uint64_t uses = cs.table.lookups() + cpu_count;
        j["expert_hit_rate"] = uses ? double(cs.table.hits + cs.table.late_hits) / double(uses) : 0.0;
        j["cpu_experts"] = cpu_count;
        j["cpu_expert_share"] = uses ? double(cpu_count) / double(uses) : 0.0;
        j["bytes_from_ram"] = cs.table.bytes_loaded;
        j["bytes_from_disk"] = ds.streamed_bytes_read;
        // Under --ram-budget the experts the GPU misses come through the RAM pool, itself fed from disk.
        if (a.ram_budget) j["ram_hit_rate"] = ds.cache.hit_rate();
        j["h2d_GBps"] = cs.h2d_GBps();
        j["h2d_busy_share"] = timed_s > 0 ? cs.h2d_seconds / timed_s : 0.0;
        j["disk_GBps"] = timed_s > 0 ? double(ds.streamed_bytes_read) / timed_s / 1e9 : 0.0;
      }
      if (a.json) {
        std::printf("%s\n", j.dump().c_str());
        continue;
      }
      std::printf("%s  p=%lld n=%lld reps=%lld cuda (%s), %s\n", j["model"].get<std::string>().c_str(),
                  (long long)p, (long long)n, (long long)a.reps, dev.name.c_str(), residency.c_str());
      if (p > 0) std::printf("  prefill  %9.2f tok/s (min %.2f, max %.2f)\n", sp.median, sp.min, sp.max);
      if (n > 0) std::printf("  decode   %9.2f tok/s (min %.2f, max %.2f)\n", sd.median, sd.min, sd.max);
      if (cache)
        std::printf("  expert hit rate %.1f%%, %s from RAM to the GPU at %.1f GB/s, %s from disk\n",
                    100.0 * j["expert_hit_rate"].get<double>(),
                    format_size(j["bytes_from_ram"].get<uint64_t>()).c_str(), j["h2d_GBps"].get<double>(),
                    format_size(j["bytes_from_disk"].get<uint64_t>()).c_str());
      std::printf("  GPU memory peak %s (driver-reported, whole device)\n", format_size(mem.peak).c_str());
    }
  std::fflush(stdout);
  return 0;
}

#endif

}  // namespace df::cli
