// diskformer bench -m MODEL [-p 512] [-n 64] [-r REPS] [--json] [...]: prefill and greedy decode throughput on the
// chosen backend, where the bytes came from and how fast they moved, through the same engine sessions as run.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli/args.h"
#include "cli/bench_stats.h"
#include "cli/commands.h"
#include "cli/compute_backend.h"
#include "cli/engine_args.h"
#include "cli/text_file.h"
#include "diskformer/backend/cpu/membw.h"
#include "diskformer/tokenizer/tokenizer.h"
#include "diskformer/util/check.h"
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

struct Rep {
  double prefill_s = 0, decode_s = 0;
  uint64_t decode_weight_bytes = 0;  // CPU: weight bytes the decode products read
  uint64_t decode_bytes_to_gpu = 0;  // CUDA under a budget: expert bytes copied to the GPU while decoding
  // CUDA under a budget, while decoding: the host's seconds in the streamed experts' layers, of them blocked at the
  // routers' round trips, and computing the CPU's share (engine::SessionStats).
  double decode_expert_host_s = 0, decode_router_wait_s = 0, decode_cpu_share_s = 0;
  engine::SessionStats session;
};

// Every sequence's stats together (their streamed experts' host times summed).
engine::SessionStats all_stats(std::vector<engine::Session>& ss) {
  std::vector<engine::SessionStats> each;
  for (engine::Session& s : ss) each.push_back(s.stats());
  return engine::sessions_together(each);
}

uint64_t bytes_to_gpu(engine::Model& model) {
  const engine::ModelStats s = model.stats();
  return s.gpu ? s.gpu->cache.bytes_loaded : 0;
}

// `streams` fresh sequences, each prefilled with its own p random tokens (one after another), then n greedy steps of
// all of them together (engine::decode_batch, as the server's slots step), each feeding its previous choice back; or,
// with `text` (one sequence), its tokens from `at` on: p of them as the prompt, the next n fed one a step whatever was
// chosen (teacher-forced: the routes of real text, where a random model's greedy loop repeats itself).
Result<Rep> one_rep(engine::Model& model, int64_t p, int64_t n, std::mt19937& rng, int64_t streams = 1,
                    std::span<const int32_t> text = {}, size_t at = 0) {
  DF_CHECK(streams >= 1 && (text.empty() || streams == 1));
  std::uniform_int_distribution<int32_t> tok(0, int32_t(model.spec().n_vocab) - 1);
  sampling::Sampler greedy({.temp = 0});
  std::vector<engine::Session> ss;
  std::vector<std::vector<int32_t>> history(static_cast<size_t>(streams));
  std::vector<int32_t> next(static_cast<size_t>(streams));
  const size_t prompt = size_t(std::max<int64_t>(p, 1));
  Rep r;
  for (int64_t k = 0; k < streams; ++k) {
    DF_ASSIGN(engine::Session s, engine::Session::create(model));
    ss.push_back(std::move(s));
    std::vector<int32_t>& h = history[size_t(k)];
    for (size_t i = 0; i < prompt; ++i) h.push_back(text.empty() ? tok(rng) : text[at + i]);
    const auto t0 = Clock::now();
    DF_TRY(ss.back().eval(h));
    next[size_t(k)] = ss.back().next_token(greedy, h);  // waits for the device
    r.prefill_s += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const engine::SessionStats before = all_stats(ss);  // also samples the device's memory in use
  std::vector<engine::Session*> step;
  for (engine::Session& s : ss) step.push_back(&s);
  const uint64_t w0 = model.context().weight_bytes_read, g0 = bytes_to_gpu(model);
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    if (!text.empty()) next[0] = text[at + prompt + size_t(i)];
    for (int64_t k = 0; k < streams; ++k) history[size_t(k)].push_back(next[size_t(k)]);
    // One sequence steps as run's decode does.
    if (streams == 1) DF_TRY(ss[0].eval(std::span<const int32_t>(next.data(), 1)));
    else DF_TRY(engine::decode_batch(model, step, next));
    for (int64_t k = 0; k < streams; ++k) next[size_t(k)] = ss[size_t(k)].next_token(greedy, history[size_t(k)]);
  }
  r.decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.decode_weight_bytes = model.context().weight_bytes_read - w0;
  r.decode_bytes_to_gpu = bytes_to_gpu(model) - g0;
  const engine::SessionStats after = all_stats(ss);
  r.decode_expert_host_s = after.expert_host_s - before.expert_host_s;
  r.decode_router_wait_s = after.expert_gpu_wait_s - before.expert_gpu_wait_s;
  r.decode_cpu_share_s = after.expert_cpu_s - before.expert_cpu_s;
  r.session = ss[0].stats();
  r.session.cpu_experts = after.cpu_experts;
  return r;
}

json opt(const std::optional<uint64_t>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

int cmd_bench(int argc, char** argv) {
  Args args("bench", "-m MODEL|-hf ORG/REPO[:QUANT]|--store DIR [-p 512] [-n 64] [-r REPS] [-t N] [-b N] [--ram-budget SIZE] "
                     "[--backend cpu|cuda] [--gpu-budget SIZE] [--json]");
  add_model_options(args, {.ctx_default = "the longest -p plus -n, at least 16"});
  args.option("-p,--n-prompt", "N[,N...]", "prompt tokens per prefill (default 512)");
  args.option("-n,--n-gen", "N[,N...]", "tokens decoded one at a time, greedily (default 64)");
  args.option("-r,--repetitions", "REPS", "timed repetitions per configuration (default 3)");
  args.option("-b,--batch-size", "N", "prompt tokens per forward pass (default 512); with --gpu-budget, the routed "
              "experts stream once per batch");
  args.option("--parallel", "N[,N...]", "sequences decoding together (default 1), as the server's --parallel slots: "
              "each prefills its own -p tokens, then -n steps of all of them at once; decode figures are the "
              "aggregate over the N sequences");
  args.option("--decode-text", "FILE", "also decode this text's tokens one a step (teacher-forced, after -p of them "
              "as the prompt; each repetition the next window): text_* figures beside the greedy ones");
  args.flag("--json", "one JSON object per configuration on stdout (see the README's bench section)");
  args.flag("--quiet", "no logs");
  if (!args.parse(argc, argv)) return args.exit_code();
  auto ps = int_list(args, "--n-prompt", 512);
  auto ns = int_list(args, "--n-gen", 64);
  auto reps = args.get_int("--repetitions", 3, 1, 1000000);
  auto batch = args.get_int("--batch-size", 512, 1, 65536);
  auto streams = int_list(args, "--parallel", 1);
  if (!ps || !ns || !reps || !batch || !streams) return args.exit_code();
  for (int64_t k : *streams)
    if (k < 1 || k > 256) {
      args.usage_error("--parallel takes sequence counts from 1 to 256");
      return args.exit_code();
    }
  if (streams->size() > 1 || streams->front() > 1) {
    if (args.has("--decode-text")) {
      args.usage_error("--decode-text times one sequence: leave --parallel out");
      return args.exit_code();
    }
  }
  auto mo = model_options(args, /*allow_cuda=*/true);
  if (!mo) return args.exit_code();
  const auto path = model_path(args);
  if (!path) return args.exit_code() ? args.exit_code() : 1;
  const bool quiet = args.has("--quiet"), as_json = args.has("--json");
  if (mo->n_ctx == 0) {
    int64_t need = 0;
    for (int64_t p : *ps)
      for (int64_t n : *ns) need = std::max(need, p + n);
    mo->n_ctx = uint32_t(std::max<int64_t>(need, 16));
  }
  const auto backend = choose_backend("bench", args);  // cuda where a GPU is present
  if (!backend) return 1;
  mo->backend = *backend;
  mo->n_batch = uint32_t(*batch);
  mo->gpu.max_batch = uint32_t(*batch);
  mo->sessions = uint32_t(*std::max_element(streams->begin(), streams->end()));  // each with its KV cache
  const bool on_cuda = *backend == engine::Backend::kCuda;
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "diskformer bench: %s\n", m.c_str());
    return 1;
  };
  const auto t_open = Clock::now();
  auto model = open_model("bench", *path, *mo, quiet);
  if (!model) return 1;
  const double open_s = std::chrono::duration<double>(Clock::now() - t_open).count();
  const std::string residency = model->describe();
  std::mt19937 rng(1234);
  std::vector<int32_t> text;
  if (auto f = args.get("--decode-text")) {
    auto body = read_text_file(*f);
    if (!body) return fail("--decode-text " + body.error().message);
    auto tok = tokenizer::Tokenizer::from_gguf(model->file());
    if (!tok) return fail(tok.error().message);
    text = tok->encode(*body, {.parse_special = false});
    int64_t need = 0;
    for (int64_t p : *ps)
      for (int64_t n : *ns) need = std::max(need, std::max<int64_t>(p, 1) + n);
    if (int64_t(text.size()) < need)
      return fail("--decode-text " + *f + ": " + std::to_string(text.size()) + " tokens, a window of -p + -n needs " +
                  std::to_string(need));
  }

  // The warm-up runs the first configuration's whole prompt on CUDA (kernel modules load and cuBLAS starts on first
  // use, which the first timed prefill would otherwise pay) and a short one on the CPU; with a budget it warms the
  // caches.
  const int64_t warm_p = std::max<int64_t>(1, std::min<int64_t>(ps->front(), int64_t(model->n_ctx()) - 4));
  if (auto warm = one_rep(*model, on_cuda ? warm_p : std::min<int64_t>(8, warm_p), 2, rng); !warm)
    return fail(warm.error().message);

  std::vector<json> rows;
  std::vector<Summary> weight_GBps;
  uint64_t gpu_peak = 0;
  for (int64_t p : *ps)
    for (int64_t n : *ns)
      for (int64_t np : *streams) {
        if (uint64_t(p + n) > model->n_ctx())
          return fail("-p " + std::to_string(p) + " + -n " + std::to_string(n) + " exceeds the context " +
                      std::to_string(model->n_ctx()) + " (-c)");
        model->reset_stats();
        const uint64_t ram0 = model->context().weight_bytes_read;
        std::vector<double> pre, dec, wgbs;
        double timed_s = 0;
        uint64_t cpu_experts = 0;
        engine::SessionStats last;
        uint64_t decode_to_gpu = 0;
        double decode_s = 0, expert_host_s = 0, router_wait_s = 0, cpu_share_s = 0;
        for (int64_t r = 0; r < *reps; ++r) {
          auto rep = one_rep(*model, p, n, rng, np);
          if (!rep) return fail(rep.error().message);
          if (p > 0) pre.push_back(double(np * p) / rep->prefill_s);
          if (n > 0) {
            dec.push_back(double(np * n) / rep->decode_s);
            wgbs.push_back(double(rep->decode_weight_bytes) / rep->decode_s / 1e9);
          }
          decode_to_gpu += rep->decode_bytes_to_gpu;
          decode_s += rep->decode_s;
          expert_host_s += rep->decode_expert_host_s;
          router_wait_s += rep->decode_router_wait_s;
          cpu_share_s += rep->decode_cpu_share_s;
          timed_s += rep->prefill_s + rep->decode_s;
          cpu_experts += rep->session.cpu_experts;
          last = rep->session;
          gpu_peak = std::max(gpu_peak, rep->session.device_used_peak.value_or(0));
        }
        const engine::ModelStats ms = model->stats();
        const Summary sp = summarize(pre), sd = summarize(dec), sw = summarize(wgbs);
        const bool streamed = ms.ram.has_value() || ms.gpu.has_value() || ms.rows.has_value();
        const uint64_t disk_bytes = ms.streamed_bytes_read + ms.streamed_row_bytes;
        const uint64_t timed_tokens = uint64_t(*reps) * uint64_t(np) * uint64_t(p + n);
        const uint64_t generated = uint64_t(*reps) * uint64_t(np) * uint64_t(n);
        json j = {{"model", std::filesystem::path(*path).filename().string()},
                  {"model_bytes", model->files().tensor_bytes},
                  {"store", model->files().from_store},
                  {"backend", engine::backend_name(*backend)},
                  {"gpu", on_cuda ? json(last.device) : json(nullptr)},
                  {"gpu_budget", opt(model->options().gpu.budget)},
                  {"ram_budget", opt(mo->ram_budget)},
                  {"threads", model->threads()},
                  {"parallel", np},
                  {"prompt_tokens", p},
                  {"gen_tokens", n},
                  {"reps", *reps},
                  {"batch", *batch},
                  {"prefill_tok_s", summary_json(sp, p > 0)},
                  {"decode_tok_s", summary_json(sd, n > 0)},
                  {"gpu_mem_peak_bytes", on_cuda ? json(gpu_peak) : json(nullptr)},
                  {"gpu_weight_bytes", opt(last.device_bytes)},
                  {"rss_peak_bytes", engine::peak_rss_bytes()},
                  {"expert_hit_rate", nullptr},
                  {"bytes_from_ram", nullptr},
                  {"bytes_from_disk", disk_bytes},
                  {"h2d_GBps", nullptr},
                  {"disk_GBps", streamed && timed_s > 0 ? json(double(disk_bytes) / timed_s / 1e9) : json(nullptr)},
                  // The per-token tables' row caches, where their rows stream (null where resident or none).
                  {"row_slots", ms.rows ? json(ms.row_slots) : json(nullptr)},
                  {"row_hit_rate",
                   ms.rows && ms.rows->cache.lookups() ? json(ms.rows->cache.hit_rate()) : json(nullptr)},
                  {"row_bytes_per_token", ms.rows && timed_tokens
                                              ? json(double(ms.streamed_row_bytes) / double(timed_tokens))
                                              : json(nullptr)},
                  // On CUDA, its GPU row cache over the RAM one: hit rate and bytes copied to the GPU per token.
                  {"gpu_row_slots", ms.gpu_rows ? json(ms.gpu_row_slots) : json(nullptr)},
                  {"gpu_row_hit_rate", ms.gpu_rows && ms.gpu_rows->cache.lookups() ? json(ms.gpu_rows->cache.hit_rate())
                                                                                   : json(nullptr)},
                  {"gpu_row_bytes_per_token", ms.gpu_rows && timed_tokens
                                                  ? json(double(ms.gpu_rows->cache.bytes_loaded) / double(timed_tokens))
                                                  : json(nullptr)},
                  {"residency", residency},
                  {"open_s", open_s},
                  {"kernels", model->context().kernels->name}};
        if (ms.ram) {
          j["ram_hit_rate"] = ms.ram->cache.hit_rate();
          j["prefetch_issued"] = ms.ram->cache.prefetch_issued;
          j["prefetch_used"] = ms.ram->cache.prefetch_used;
        }
        if (!on_cuda) {
          j["expert_hit_rate"] = ms.ram && ms.ram->cache.lookups() ? json(ms.ram->cache.hit_rate()) : json(nullptr);
          j["bytes_from_ram"] = model->context().weight_bytes_read - ram0;
        }
        if (ms.gpu) {
          const cache::CacheStats& c = ms.gpu->cache;
          // Of all expert uses: found on the GPU (the CPU's share counts as not found).
          const uint64_t uses = c.lookups() + cpu_experts;
          j["gpu_slots"] = ms.gpu_slots;
          j["expert_hit_rate"] = uses ? double(c.hits + c.late_hits) / double(uses) : 0.0;
          j["cpu_experts"] = cpu_experts;
          j["cpu_expert_share"] = uses ? double(cpu_experts) / double(uses) : 0.0;
          j["gpu_prefetch_issued"] = c.prefetch_issued;
          j["gpu_prefetch_used"] = c.prefetch_used;
          j["bytes_from_ram"] = c.bytes_loaded;
          j["h2d_GBps"] = ms.gpu->load_GBps();
          j["h2d_busy_share"] = timed_s > 0 ? ms.gpu->load_seconds / timed_s : 0.0;
          j["decode_bytes_to_gpu_per_token"] = generated ? double(decode_to_gpu) / double(generated) : 0.0;
          // A decode step (every sequence's token) split by what the host was doing: blocked at the routers' round
          // trips, computing the CPU's share, planning the experts (schedule, pins, copies and launches queued), and
          // the rest (the layers' other launches, the logits and the choice of the token).
          const double to_ms = 1e3 / std::max(double(*reps * n), 1.0);  // seconds of all steps -> ms a step
          j["decode_step_ms"] = n > 0 ? json{{"total", decode_s * to_ms},
                                             {"router_wait", router_wait_s * to_ms},
                                             {"cpu_share", cpu_share_s * to_ms},
                                             {"expert_planning", (expert_host_s - router_wait_s - cpu_share_s) * to_ms},
                                             {"rest", (decode_s - expert_host_s) * to_ms}}
                                      : json(nullptr);
        }
        if (!text.empty() && n > 0) {
          // The same configuration on the text's windows, its own counters.
          model->reset_stats();
          std::vector<double> tdec;
          uint64_t tcpu = 0;
          const size_t window = size_t(std::max<int64_t>(p, 1) + n);
          for (int64_t r = 0; r < *reps; ++r) {
            const size_t at = (size_t(r) * window) % (text.size() - window + 1);
            auto rep = one_rep(*model, p, n, rng, 1, text, at);
            if (!rep) return fail(rep.error().message);
            tdec.push_back(double(n) / rep->decode_s);
            tcpu += rep->session.cpu_experts;
          }
          const engine::ModelStats ts = model->stats();
          j["text_decode_tok_s"] = summary_json(summarize(tdec), true);
          if (ts.gpu) {
            const cache::CacheStats& c = ts.gpu->cache;
            const uint64_t uses = c.lookups() + tcpu;
            j["text_expert_hit_rate"] = uses ? double(c.hits + c.late_hits) / double(uses) : 0.0;
            j["text_cpu_expert_share"] = uses ? double(tcpu) / double(uses) : 0.0;
          } else if (ts.ram && ts.ram->cache.lookups()) {
            j["text_expert_hit_rate"] = ts.ram->cache.hit_rate();
          }
          if (ts.ram) j["text_ram_hit_rate"] = ts.ram->cache.hit_rate();
        }
        rows.push_back(std::move(j));
        weight_GBps.push_back(sw);
      }

  // CPU runs: the weight bytes per second against the memory read bandwidth, measured after the runs so that its
  // buffer does not count in their peak RSS.
  double mem_bw = 0;
  if (!on_cuda) {
    mem_bw = cpu::measure_read_bandwidth(*model->context().pool, 256ull << 20).read_GBps;
    if (!quiet)
      std::fprintf(stderr, "diskformer bench: memory read bandwidth %.1f GB/s (%d threads)\n", mem_bw,
                   model->threads());
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    json& j = rows[i];
    const int64_t p = j["prompt_tokens"], n = j["gen_tokens"];
    const bool dec = n > 0 && !on_cuda;
    j["mem_read_GBps"] = on_cuda ? json(nullptr) : json(mem_bw);
    j["decode_weight_GBps"] = dec ? json(weight_GBps[i].median) : json(nullptr);
    j["decode_weight_fraction_of_mem_bw"] = dec ? json(weight_GBps[i].median / mem_bw) : json(nullptr);
    if (as_json) {
      std::printf("%s\n", j.dump().c_str());
      continue;
    }
    const std::string where = on_cuda ? "cuda (" + j["gpu"].get<std::string>() + ")" : std::string("cpu");
    const int64_t np = j["parallel"];
    std::printf("%s  p=%lld n=%lld%s reps=%lld %s, %d threads, kernels %s\n", j["model"].get<std::string>().c_str(),
                (long long)p, (long long)n,
                np > 1 ? (" x " + std::to_string(np) + " sequences (aggregate tok/s)").c_str() : "", (long long)*reps,
                where.c_str(), model->threads(), j["kernels"].get<std::string>().c_str());
    std::printf("  %s\n", residency.c_str());
    if (p > 0)
      std::printf("  prefill  %9.2f tok/s (min %.2f, max %.2f)\n", j["prefill_tok_s"]["median"].get<double>(),
                  j["prefill_tok_s"]["min"].get<double>(), j["prefill_tok_s"]["max"].get<double>());
    if (n > 0)
      std::printf("  decode   %9.2f tok/s (min %.2f, max %.2f)\n", j["decode_tok_s"]["median"].get<double>(),
                  j["decode_tok_s"]["min"].get<double>(), j["decode_tok_s"]["max"].get<double>());
    if (j.contains("text_decode_tok_s"))
      std::printf("  decode of the text %9.2f tok/s (min %.2f, max %.2f)%s\n",
                  j["text_decode_tok_s"]["median"].get<double>(), j["text_decode_tok_s"]["min"].get<double>(),
                  j["text_decode_tok_s"]["max"].get<double>(),
                  j.contains("text_expert_hit_rate")
                      ? (", expert hit rate " + std::to_string(int(100 * j["text_expert_hit_rate"].get<double>())) + "%")
                            .c_str()
                      : "");
    if (dec)
      std::printf("  decode weights %.2f GB/s = %.0f%% of the %.1f GB/s memory read bandwidth\n",
                  weight_GBps[i].median, 100.0 * weight_GBps[i].median / mem_bw, mem_bw);
    if (j.contains("gpu_slots"))
      std::printf("  expert hit rate %.1f%% (%llu slots), CPU share %.1f%%, %s from RAM to the GPU at %.1f GB/s\n",
                  100.0 * j["expert_hit_rate"].get<double>(), (unsigned long long)j["gpu_slots"].get<uint64_t>(),
                  100.0 * j["cpu_expert_share"].get<double>(),
                  format_size(j["bytes_from_ram"].get<uint64_t>()).c_str(), j["h2d_GBps"].get<double>());
    if (j.contains("decode_bytes_to_gpu_per_token") && n > 0)
      std::printf("  decode copied %s of experts to the GPU per generated token\n",
                  format_size(uint64_t(j["decode_bytes_to_gpu_per_token"].get<double>())).c_str());
    if (j.contains("decode_step_ms") && !j["decode_step_ms"].is_null()) {
      const json& t = j["decode_step_ms"];
      std::printf("  decode step %.2f ms: %.2f waiting for the GPU at the routers, %.2f on the CPU's share, %.2f "
                  "planning the experts, %.2f the rest\n",
                  t["total"].get<double>(), t["router_wait"].get<double>(), t["cpu_share"].get<double>(),
                  t["expert_planning"].get<double>(), t["rest"].get<double>());
    }
    if (j.contains("ram_hit_rate"))
      std::printf("  disk     %s read in the timed runs (%.2f GB/s), RAM cache hit rate %.1f%%\n",
                  format_size(j["bytes_from_disk"].get<uint64_t>()).c_str(), j["disk_GBps"].get<double>(),
                  100.0 * j["ram_hit_rate"].get<double>());
    if (!j["row_slots"].is_null())
      std::printf("  rows     row caches of %llu rows (per-token tables): hit rate %.1f%%, %.0f bytes per token from "
                  "disk\n",
                  (unsigned long long)j["row_slots"].get<uint64_t>(),
                  j["row_hit_rate"].is_null() ? 0.0 : 100.0 * j["row_hit_rate"].get<double>(),
                  j["row_bytes_per_token"].is_null() ? 0.0 : j["row_bytes_per_token"].get<double>());
    if (!j["gpu_row_slots"].is_null())
      std::printf("  GPU rows %llu rows of the table on the GPU: hit rate %.1f%%, %.0f bytes per token copied up\n",
                  (unsigned long long)j["gpu_row_slots"].get<uint64_t>(),
                  j["gpu_row_hit_rate"].is_null() ? 0.0 : 100.0 * j["gpu_row_hit_rate"].get<double>(),
                  j["gpu_row_bytes_per_token"].is_null() ? 0.0 : j["gpu_row_bytes_per_token"].get<double>());
    if (on_cuda) std::printf("  GPU memory peak %s (driver-reported, whole device)\n", format_size(gpu_peak).c_str());
    std::printf("  peak RSS %s\n", format_size(j["rss_peak_bytes"].get<uint64_t>()).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace df::cli
