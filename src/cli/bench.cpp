// diskformer bench -m MODEL [-p 512] [-n 64] [-r REPS] [-t N] [--ram-budget SIZE] [--json]: prefill and decode
// throughput, where the bytes came from, and the weight bytes per second against the memory bandwidth measured in
// the same run.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli/args.h"
#include "cli/bench_cuda.h"
#include "cli/bench_stats.h"
#include "cli/commands.h"
#include "cli/compute_backend.h"
#include "cli/engine_args.h"
#include "diskformer/backend/cpu/membw.h"
#include "diskformer/util/size.h"

namespace df::cli {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::optional<std::vector<int64_t>> int_list(Args& args, const std::string& name, int64_t fallback) {
  const std::string text = args.get_or(name, std::to_string(fallback));
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    // At most a context's length (-c's limit), so that p + n and the context they need cannot overflow.
    if (item.empty() || *end != '\0' || errno == ERANGE || v < 0 || v > (1 << 24)) {
      args.usage_error(name + " takes integers from 0 to 16777216 separated by commas, got '" + text + "'");
      return std::nullopt;
    }
    out.push_back(v);
  }
  return out;
}

struct RepResult {
  double prefill_s = 0, decode_s = 0;
  uint64_t decode_weight_bytes = 0;
};

Result<RepResult> one_rep(engine::Model& model, int64_t p, int64_t n, uint32_t n_batch, std::mt19937& rng) {
  engine::Session s(model);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(model.spec().n_vocab) - 1);
  std::vector<int32_t> prompt(size_t(std::max<int64_t>(p, 1)));
  for (auto& t : prompt) t = tok(rng);
  RepResult r;
  auto t0 = Clock::now();
  DF_TRY(s.eval(prompt, n_batch));
  r.prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const uint64_t w0 = model.context().weight_bytes_read;
  t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = tok(rng);
    DF_TRY(s.eval(std::span<const int32_t>(&id, 1)));
  }
  r.decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.decode_weight_bytes = model.context().weight_bytes_read - w0;
  return r;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  Args args("bench", "-m MODEL [-p 512] [-n 64] [-r REPS] [-t N] [-b N] [--ram-budget SIZE] [--backend cpu|cuda] [--gpu-budget SIZE] [--json]");
  add_model_options(args);
  args.option("-p,--n-prompt", "N[,N...]", "prompt tokens per prefill (default 512)");
  args.option("-n,--n-gen", "N[,N...]", "tokens decoded one at a time (default 64)");
  args.option("-r,--repetitions", "REPS", "timed repetitions per configuration (default 3)");
  args.option("-b,--batch-size", "N", "prompt tokens per forward pass (default 512); with --gpu-budget, the routed "
              "experts stream once per batch");
  args.flag("--json", "one JSON object per configuration on stdout (CLI.md's bench --json)");
  args.flag("--quiet", "no logs");
  if (!args.parse(argc, argv)) return args.exit_code();
  auto path = args.get("--model");
  if (!path) return args.usage_error("-m MODEL is required");
  auto ps = int_list(args, "--n-prompt", 512);
  auto ns = int_list(args, "--n-gen", 64);
  auto reps = args.get_int("--repetitions", 3, 1, 1000000);
  auto batch = args.get_int("--batch-size", 512, 1, 65536);
  if (!ps || !ns || !reps || !batch) return args.exit_code();
  auto mo = model_options(args, /*allow_cuda=*/true);
  if (!mo) return args.exit_code();
  const bool quiet = args.has("--quiet"), as_json = args.has("--json");
  if (mo->n_ctx == 0) {
    int64_t need = 0;
    for (int64_t p : *ps)
      for (int64_t n : *ns) need = std::max(need, p + n);
    mo->n_ctx = uint32_t(std::max<int64_t>(need, 16));
  }

  const std::optional<std::string> chosen = choose_backend("bench", args);  // cuda where a GPU is present
  if (!chosen) return 1;
  const bool on_cuda = *chosen == "cuda";
  if (on_cuda) mo->host_allocator = cuda_host_allocator();
  auto model = open_model("bench", *path, *mo, quiet);
  if (!model) return 1;
  uint64_t model_bytes = 0;
  for (const auto& t : model->file().tensors) model_bytes += t.n_bytes;
  if (on_cuda)
    return bench_cuda(*model, {.path = *path, .model_bytes = model_bytes, .prompts = *ps, .gens = *ns,
                               .reps = *reps, .json = as_json, .quiet = quiet, .gpu_budget = gpu_budget(args),
                               .ram_budget = mo->ram_budget, .cpu_experts = cpu_experts(args),
                               .max_batch = uint32_t(*batch)});
  std::mt19937 rng(1234);

  // A short warm-up so that first-touch costs (and, with a budget, a cold cache) do not land in the first rep.
  {
    auto warm = one_rep(*model, std::min<int64_t>(8, ps->front()), 2, uint32_t(*batch), rng);
    if (!warm.ok()) {
      std::fprintf(stderr, "diskformer bench: %s\n", warm.error().message.c_str());
      return 1;
    }
  }
  struct Row {
    json j;
    Summary sp, sd, sw;
    bool streams;
    uint64_t disk_bytes;
    double timed_s, hit_rate;
  };
  std::vector<Row> rows;
  for (int64_t p : *ps)
    for (int64_t n : *ns) {
      if (uint64_t(p + n) > model->n_ctx()) {
        std::fprintf(stderr, "diskformer bench: -p %lld + -n %lld exceeds the context %u (-c)\n", (long long)p,
                     (long long)n, model->n_ctx());
        return 1;
      }
      model->weights().reset_stream_stats();
      const auto disk0 = model->weights().stats();
      const uint64_t ram0 = model->context().weight_bytes_read;
      std::vector<double> pre, dec, wgbs;
      double timed_s = 0;
      for (int64_t r = 0; r < *reps; ++r) {
        auto rep = one_rep(*model, p, n, uint32_t(*batch), rng);
        if (!rep.ok()) {
          std::fprintf(stderr, "diskformer bench: %s\n", rep.error().message.c_str());
          return 1;
        }
        if (p > 0) pre.push_back(double(p) / rep->prefill_s);
        if (n > 0) {
          dec.push_back(double(n) / rep->decode_s);
          wgbs.push_back(double(rep->decode_weight_bytes) / rep->decode_s / 1e9);
        }
        timed_s += rep->prefill_s + rep->decode_s;
      }
      const auto st = model->weights().stats();
      const bool streams = model->weights().plan().mode != engine::Residency::kAllResident;
      const uint64_t disk_bytes = st.streamed_bytes_read - disk0.streamed_bytes_read;
      const Summary sp = summarize(pre), sd = summarize(dec), sw = summarize(wgbs);
      json j = {{"model", std::filesystem::path(*path).filename().string()},
                {"model_bytes", model_bytes},
                {"backend", "cpu"},
                {"gpu_budget", nullptr},
                {"ram_budget", mo->ram_budget ? json(*mo->ram_budget) : json(nullptr)},
                {"threads", model->threads()},
                {"prompt_tokens", p},
                {"gen_tokens", n},
                {"reps", *reps},
                {"prefill_tok_s", summary_json(sp, p > 0)},
                {"decode_tok_s", summary_json(sd, n > 0)},
                {"gpu_mem_peak_bytes", nullptr},
                {"rss_peak_bytes", engine::peak_rss_bytes()},
                {"expert_hit_rate", streams && st.cache.lookups() ? json(st.cache.hit_rate()) : json(nullptr)},
                {"bytes_from_ram", model->context().weight_bytes_read - ram0},
                {"bytes_from_disk", disk_bytes},
                {"h2d_GBps", nullptr},
                {"disk_GBps", streams ? json(double(disk_bytes) / timed_s / 1e9) : json(nullptr)},
                {"prefetch_issued", streams ? json(st.cache.prefetch_issued) : json(nullptr)},
                {"prefetch_used", streams ? json(st.cache.prefetch_used) : json(nullptr)},
                {"residency", engine::residency_name(model->weights().plan().mode)},
                {"kernels", model->context().kernels->name}};
      rows.push_back({j, sp, sd, sw, streams, disk_bytes, timed_s, st.cache.hit_rate()});
    }

  // Measured after the runs, so that its buffer does not count in their peak RSS.
  const auto bw = cpu::measure_read_bandwidth(*model->context().pool, 256ull << 20);
  if (!quiet)
    std::fprintf(stderr, "diskformer bench: memory read bandwidth %.1f GB/s (%d threads)\n", bw.read_GBps,
                 model->threads());
  for (auto& row : rows) {
    json& j = row.j;
    const int64_t p = j["prompt_tokens"], n = j["gen_tokens"];
    j["mem_read_GBps"] = bw.read_GBps;
    j["decode_weight_GBps"] = n > 0 ? json(row.sw.median) : json(nullptr);
    j["decode_weight_fraction_of_mem_bw"] = n > 0 ? json(row.sw.median / bw.read_GBps) : json(nullptr);
    if (as_json) {
      std::printf("%s\n", j.dump().c_str());
      continue;
    }
    std::printf("%s  p=%lld n=%lld reps=%lld threads=%d %s, kernels %s\n", j["model"].get<std::string>().c_str(),
                (long long)p, (long long)n, (long long)*reps, model->threads(), j["residency"].get<std::string>().c_str(),
                j["kernels"].get<std::string>().c_str());
    if (p > 0) std::printf("  prefill  %9.2f tok/s (min %.2f, max %.2f)\n", row.sp.median, row.sp.min, row.sp.max);
    if (n > 0)
      std::printf("  decode   %9.2f tok/s (min %.2f, max %.2f); weights %.2f GB/s = %.0f%% of the %.1f GB/s memory "
                  "read bandwidth\n",
                  row.sd.median, row.sd.min, row.sd.max, row.sw.median, 100.0 * row.sw.median / bw.read_GBps,
                  bw.read_GBps);
    if (row.streams)
      std::printf("  disk     %s read in the timed runs (%.2f GB/s), cache hit rate %.1f%%\n",
                  format_size(row.disk_bytes).c_str(), double(row.disk_bytes) / row.timed_s / 1e9,
                  100.0 * row.hit_rate);
    std::printf("  peak RSS %s\n", format_size(j["rss_peak_bytes"].get<uint64_t>()).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace df::cli
