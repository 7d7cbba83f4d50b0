// What run and chat report at the end of a generation: the stats line, or with --json-stats one JSON object.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "diskformer/engine/generate.h"
#include "diskformer/engine/model.h"
#include "diskformer/engine/session.h"

namespace df::cli {

// "prompt 12 tok (210.5 tok/s), decode 32 tok (45.1 tok/s), disk 10.9 MiB read, cache hit rate 93.8%,
//  peak RSS 48.2 MiB"; a decode of one token has no rate of its own ("n/a": it comes from the prompt's logits).
std::string stats_line(engine::Model& model, const engine::GenerateStats& st);

// The same and the backend's (backend_stats) as one object: backend, device, gpu_memory_bytes,
// gpu_memory_used_peak_bytes, n_ctx, n_past, prompt_tokens, prompt_tok_s, gen_tokens, decode_evals, decode_tok_s,
// stop, bytes_from_disk, ram_hit_rate, gpu_hit_rate, bytes_to_gpu, cpu_experts, rss_peak_bytes; null where a field
// does not apply.
nlohmann::ordered_json stats_json(engine::Model& model, engine::Session& session, const engine::GenerateStats& st);

}  // namespace df::cli
