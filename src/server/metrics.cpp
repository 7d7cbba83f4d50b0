#include "server/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace df::server {

namespace {

class Writer {
 public:
  void metric(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const char* name, double v, const std::string& labels = "") {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    out_ += std::string(name) + (labels.empty() ? "" : "{" + labels + "}") + " " + buf + "\n";
  }
  void one(const char* name, const char* type, const char* help, double v) {
    metric(name, type, help);
    sample(name, v);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string prometheus_text(const SchedulerStats& s, const std::map<std::pair<std::string, int>, uint64_t>& requests,
                            const MetricsContext& c) {
  Writer w;
  w.metric("diskformer_requests_total", "counter", "HTTP responses sent, by route and status.");
  for (const auto& [key, n] : requests)
    w.sample("diskformer_requests_total", double(n),
             "route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"");
  w.one("diskformer_generations_total", "counter", "Generations that ended normally (stop or length).",
        double(s.requests_done));
  w.one("diskformer_generations_cancelled_total", "counter", "Generations whose client went away first.",
        double(s.requests_cancelled));
  w.one("diskformer_generations_failed_total", "counter", "Generations that ended in an error.",
        double(s.requests_failed));
  w.one("diskformer_prompt_tokens_total", "counter", "Prompt tokens evaluated.", double(s.prompt_tokens));
  w.one("diskformer_prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's cache instead.",
        double(s.cached_tokens));
  w.one("diskformer_generated_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
  w.one("diskformer_decode_steps_total", "counter",
        "Decode steps; each evaluates one token of every generating slot at once.", double(s.decode_steps));
  w.one("diskformer_decoded_tokens_total", "counter", "Tokens evaluated by decode steps.", double(s.decoded_tokens));
  w.one("diskformer_decode_batch", "gauge", "Sequences in the latest decode step.", double(s.last_batch));
  w.one("diskformer_prompt_seconds_total", "counter", "Time spent evaluating prompts.", s.prompt_seconds);
  w.one("diskformer_decode_seconds_total", "counter", "Time spent in decode steps.", s.decode_seconds);
  w.one("diskformer_prompt_tokens_per_second", "gauge", "Prompt evaluation rate over the last 5 seconds of it.",
        s.prompt_tok_s);
  w.one("diskformer_decode_tokens_per_second", "gauge",
        "Aggregate decode rate of all slots over the last 5 seconds of decoding.", s.decode_tok_s);
  w.one("diskformer_slots", "gauge", "Slots (--parallel), each with its own KV cache.", double(s.slots));
  w.one("diskformer_slots_busy", "gauge", "Slots serving a request.", double(s.busy));
  w.one("diskformer_requests_queued", "gauge", "Requests waiting for a slot.", double(s.queued));
  w.one("diskformer_context_size", "gauge", "Context of each slot, in tokens (-c).", double(c.n_ctx));

  w.one("diskformer_ram_used_bytes", "gauge", "Resident memory of the process.", double(c.rss_bytes));
  if (c.ram_budget) w.one("diskformer_ram_budget_bytes", "gauge", "--ram-budget.", double(*c.ram_budget));
  if (s.session.device_bytes)
    w.one("diskformer_gpu_used_bytes", "gauge", "GPU memory the model and the slots' sessions hold.",
          double(*s.session.device_bytes));
  if (s.session.device_used_peak)
    w.one("diskformer_gpu_device_used_peak_bytes", "gauge", "Driver-reported use of the whole GPU, peak of samples.",
          double(*s.session.device_used_peak));
  if (c.gpu_budget) w.one("diskformer_gpu_budget_bytes", "gauge", "--gpu-budget.", double(*c.gpu_budget));

  const engine::ModelStats& m = s.model;
  w.metric("diskformer_expert_cache_hit_ratio", "gauge", "Expert records found in a tier's cache, of those asked for.");
  if (m.ram) w.sample("diskformer_expert_cache_hit_ratio", m.ram->cache.hit_rate(), "tier=\"ram\"");
  if (m.gpu) w.sample("diskformer_expert_cache_hit_ratio", m.gpu->cache.hit_rate(), "tier=\"gpu\"");
  w.metric("diskformer_expert_cache_lookups_total", "counter", "Expert records asked of a tier.");
  if (m.ram) w.sample("diskformer_expert_cache_lookups_total", double(m.ram->cache.lookups()), "tier=\"ram\"");
  if (m.gpu) w.sample("diskformer_expert_cache_lookups_total", double(m.gpu->cache.lookups()), "tier=\"gpu\"");
  w.metric("diskformer_row_cache_hit_ratio", "gauge",
           "Per-layer embedding rows found in a row cache, of those asked for (where the table streams).");
  if (m.rows) w.sample("diskformer_row_cache_hit_ratio", m.rows->cache.hit_rate(), "tier=\"ram\"");
  if (m.gpu_rows) w.sample("diskformer_row_cache_hit_ratio", m.gpu_rows->cache.hit_rate(), "tier=\"gpu\"");
  w.metric("diskformer_row_cache_lookups_total", "counter", "Per-layer embedding rows asked of a row cache.");
  if (m.rows) w.sample("diskformer_row_cache_lookups_total", double(m.rows->cache.lookups()), "tier=\"ram\"");
  if (m.gpu_rows) w.sample("diskformer_row_cache_lookups_total", double(m.gpu_rows->cache.lookups()), "tier=\"gpu\"");
  w.one("diskformer_disk_read_bytes_total", "counter", "Bytes read from the model file or store (at open and since).",
        double(m.bytes_from_disk()));
  w.one("diskformer_disk_streamed_bytes_total", "counter", "Bytes read into the RAM tier's slots since open.",
        double(m.streamed_bytes_read));
  w.one("diskformer_pcie_copied_bytes_total", "counter",
        "Bytes of streamed experts and per-layer embedding rows copied to the GPU.",
        double((m.gpu ? m.gpu->cache.bytes_loaded : 0) + (m.gpu_rows ? m.gpu_rows->cache.bytes_loaded : 0)));
  w.metric("diskformer_info", "gauge", "The backend serving (always 1).");
  w.sample("diskformer_info", 1, "backend=\"" + c.backend + "\"");
  return w.take();
}

uint64_t current_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(f >> size >> resident)) return 0;
  return resident * uint64_t(::sysconf(_SC_PAGESIZE));
}

}  // namespace df::server
