#include "cli/gen_stats.h"

#include <cstdio>

#include "diskformer/util/size.h"

namespace df::cli {

namespace {
using Json = nlohmann::ordered_json;
Json or_null(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }
Json or_null(const std::optional<uint64_t>& v) { return v ? Json(*v) : Json(nullptr); }
double row_bytes_per_token(const engine::ModelStats& d, const engine::GenerateStats& st) {
  const uint64_t tokens = uint64_t(st.prompt_tokens + st.gen_tokens);
  return tokens ? double(d.streamed_row_bytes) / double(tokens) : 0.0;
}
}  // namespace

std::string stats_line(engine::Model& model, const engine::GenerateStats& st) {
  const engine::ModelStats d = model.stats();
  std::string hit = "n/a (all resident)";
  if (d.ram && d.ram->cache.lookups()) hit = std::to_string(int(d.ram->cache.hit_rate() * 1000) / 10.0).substr(0, 5) + "%";
  // The per-layer embedding table's row cache, where its rows stream: hit rate and rows read per token.
  std::string rows;
  if (d.rows) {
    char r[128];
    std::snprintf(r, sizeof r, "row cache hit rate %.1f%%, %.0f B/token of rows from disk, ",
                  d.rows->cache.lookups() ? 100.0 * d.rows->cache.hit_rate() : 0.0, row_bytes_per_token(d, st));
    rows = r;
  }
  if (d.gpu_rows) {  // on CUDA, the GPU's rows of the table, over the RAM cache above
    char r[96];
    std::snprintf(r, sizeof r, "GPU row hit rate %.1f%%, ",
                  d.gpu_rows->cache.lookups() ? 100.0 * d.gpu_rows->cache.hit_rate() : 0.0);
    rows += r;
  }
  char rate[32] = "n/a";
  if (const auto r = st.gen_tok_s()) std::snprintf(rate, sizeof rate, "%.1f tok/s", *r);
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "prompt %lld tok (%.1f tok/s), decode %lld tok (%s), disk %s read, cache hit rate %s, %speak RSS %s",
                (long long)st.prompt_tokens, st.prompt_tok_s(), (long long)st.gen_tokens, rate,
                format_size(d.bytes_from_disk()).c_str(), hit.c_str(), rows.c_str(),
                format_size(engine::peak_rss_bytes()).c_str());
  return buf;
}

Json stats_json(engine::Model& model, engine::Session& session, const engine::GenerateStats& st) {
  const engine::SessionStats s = session.stats();
  const engine::ModelStats d = model.stats();
  const bool ram_streams = d.ram && d.ram->cache.lookups();
  return Json{{"backend", s.backend},
              {"device", s.device.empty() ? Json(nullptr) : Json(s.device)},
              {"gpu_memory_bytes", or_null(s.device_bytes)},
              {"gpu_memory_used_peak_bytes", or_null(s.device_used_peak)},
              {"n_ctx", session.n_ctx()},
              {"n_past", session.n_past()},
              {"prompt_tokens", st.prompt_tokens},
              {"prompt_tok_s", st.prompt_tok_s()},
              {"gen_tokens", st.gen_tokens},
              {"decode_evals", st.decode_evals},
              {"decode_tok_s", or_null(st.gen_tok_s())},
              {"stop", engine::stop_reason_name(st.stop)},
              {"bytes_from_disk", d.bytes_from_disk()},
              {"ram_hit_rate", ram_streams ? Json(d.ram->cache.hit_rate()) : Json(nullptr)},
              {"gpu_hit_rate", d.gpu ? Json(d.gpu->cache.hit_rate()) : Json(nullptr)},
              {"bytes_to_gpu", d.gpu ? Json(d.gpu->cache.bytes_loaded) : Json(nullptr)},
              {"row_hit_rate", d.rows ? Json(d.rows->cache.hit_rate()) : Json(nullptr)},
              {"row_bytes_per_token", d.rows ? Json(row_bytes_per_token(d, st)) : Json(nullptr)},
              {"gpu_row_hit_rate", d.gpu_rows ? Json(d.gpu_rows->cache.hit_rate()) : Json(nullptr)},
              {"cpu_experts", s.cpu_experts},
              {"rss_peak_bytes", engine::peak_rss_bytes()}};
}

}  // namespace df::cli
