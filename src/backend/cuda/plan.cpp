#include "diskformer/backend/cuda/plan.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "diskformer/backend/cpu/ops.h"
#include "diskformer/util/check.h"
#include "diskformer/util/size.h"

namespace df::cuda {

namespace {

uint64_t align256(uint64_t n) { return (n + 255) / 256 * 256; }

// Bytes of a tensor as the GPU holds it (rows x row_bytes), 0 for an absent one.
uint64_t gpu_bytes(const gguf::TensorInfo* t) { return t ? align256(t->rows() * t->row_bytes()) : 0; }

// Whether a dense product (attention, dense FFN, output head) prefills through dequantized tiles (Buf::dequant).
bool dense_dequant(const model::ModelTensors& t) {
  auto of = [](const gguf::TensorInfo* w) { return w != nullptr && dequant_prefill_type(w->type); };
  bool any = of(t.output);
  for (const auto& l : t.layers)
    for (auto* w : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down, l.ssm_qkv, l.ssm_z, l.ssm_beta,
                    l.ssm_alpha, l.ssm_out, l.gate_shexp, l.up_shexp, l.down_shexp})
      any = any || of(w);
  return any;
}

std::string item(const char* name, uint64_t bytes) { return std::string(name) + " " + format_size(bytes); }

// "CUDA context 512.0 MiB, token embeddings 166.9 MiB, ..." : every non-zero item of the resident part.
std::string itemize(const GpuPlan& p) {
  const GpuResident& r = p.resident;
  std::string s = item("CUDA context", r.context) + ", token embeddings " +
                  (p.token_embd_on_host ? std::string("in pinned host RAM") : format_size(r.token_embd));
  if (r.output) s += ", " + item("output head", r.output);
  s += ", " + item("attention", r.attention) + ", " + item("norms", r.norms);
  if (r.routers) s += ", " + item("routers", r.routers);
  if (r.dense_ffn) s += ", " + item("dense FFN", r.dense_ffn);
  if (p.ple_row_slots)
    s += ", per-layer embeddings through " + std::to_string(p.ple_row_slots) + " GPU rows " + format_size(r.ple_table);
  else if (r.ple_table)
    s += ", " + item("per-layer embeddings", r.ple_table);
  s += ", KV cache " + format_size(r.kv_cache) + " at " + std::to_string(p.n_ctx) + " positions";
  if (r.recurrent) s += ", " + item("recurrent state", r.recurrent);
  s += ", work buffers " +
       format_size(r.work) + " for batches of " + std::to_string(p.max_batch) + ", margin " + format_size(r.margin);
  return s;
}

std::string bytes_text(uint64_t n) { return format_size(n) + " (" + std::to_string(n) + " bytes)"; }

}  // namespace

std::vector<std::vector<cache::PartPlace>> expert_planes(const model::RecordLayouts& layouts) {
  std::vector<std::vector<cache::PartPlace>> parts(layouts.experts.size());
  for (size_t il = 0; il < layouts.experts.size(); ++il) {
    const model::ExpertLayout& x = layouts.experts[il];
    if (!x.present()) continue;
    parts[il] = {{x.gate_at, x.gate.bytes()}, {x.up_at, x.up.bytes()}, {x.down_at, x.down.bytes()}};
  }
  return parts;
}

bool cpu_experts_round_alike(const model::RecordLayouts& layouts) {
  for (const model::ExpertLayout& e : layouts.experts)
    for (const model::Mat* m : {&e.gate, &e.up, &e.down})
      if (e.present() && !cpu::rounds_as_cuda_decode(m->type)) return false;
  return true;
}

Result<GpuPlan> plan_gpu(const model::ModelSpec& spec, const model::ModelTensors& t,
                         const model::RecordLayouts& layouts, const GpuPlanOptions& o) {
  DF_CHECK(t.layers.size() == spec.n_layer);
  GpuPlan p;
  p.budget = o.budget;
  p.n_ctx = o.n_ctx;
  p.max_batch = o.max_batch;
  GpuResident& r = p.resident;
  r.context = o.context_bytes;
  r.token_embd = gpu_bytes(t.token_embd);
  r.output = t.output == t.token_embd ? 0 : gpu_bytes(t.output);
  r.norms = gpu_bytes(t.output_norm) + gpu_bytes(t.rope_freqs) + gpu_bytes(t.ple_proj_norm);
  r.dense_ffn = gpu_bytes(t.ple_model_proj);
  r.ple_table = gpu_bytes(t.ple_table);
  for (const auto& l : t.layers) {
    for (auto* w : {l.wq, l.wk, l.wv, l.wo, l.ssm_qkv, l.ssm_z, l.ssm_beta, l.ssm_alpha, l.ssm_out})
      r.attention += gpu_bytes(w);
    for (auto* w : {l.attn_norm, l.ffn_norm, l.q_norm, l.k_norm, l.ssm_conv, l.ssm_dt_bias, l.ssm_a, l.ssm_norm,
                    l.attn_post_norm, l.ffn_post_norm, l.out_scale, l.router_scale, l.ffn_pre_norm_2,
                    l.ffn_post_norm_1, l.ffn_post_norm_2, l.down_exps_scale, l.ple_post_norm})
      r.norms += gpu_bytes(w);
    for (auto* w : {l.ffn_gate, l.ffn_up, l.ffn_down, l.gate_shexp, l.up_shexp, l.down_shexp, l.ple_gate, l.ple_proj})
      r.dense_ffn += gpu_bytes(w);
    r.routers += gpu_bytes(l.gate_inp) + gpu_bytes(l.gate_inp_shexp);
    for (auto* w : {l.gate_exps, l.up_exps, l.down_exps, l.gate_up_exps}) p.experts_bytes += gpu_bytes(w);
  }
  if (spec.moe()) p.record_bytes = cache::plane_slot_bytes(expert_planes(layouts));
  // A resident run's session; a streaming one adds its buffers for the tier's groups (counted below when it streams).
  const bool dequant = dense_dequant(t);
  const BufferTable buffers =
      session_buffers(spec, {.n_ctx = o.n_ctx, .max_batch = o.max_batch, .dequant_tiles = dequant});
  const uint64_t kv_one = buffers[Buf::k_cache] + buffers[Buf::v_cache];
  const uint64_t state_one = buffers[Buf::rec_state] + buffers[Buf::rec_save];
  r.kv_cache = kv_one * o.sessions;
  r.recurrent = state_one * o.sessions;
  // The sessions share their work buffers; each keeps its RoPE tables and logits.
  const uint64_t own_rest = buffers.own() - kv_one - state_one;
  r.work = buffers.shared() + own_rest * o.sessions;
  r.margin = kGpuMarginBytes;
  const uint64_t records = spec.moe() ? uint64_t(spec.n_layer) * spec.n_expert : 0;
  if (records > (1u << 31))
    return Error{"GPU plan: " + std::to_string(spec.n_layer) + " layers x " + std::to_string(spec.n_expert) +
                 " experts are more expert records than a slot pool indexes (2^31)"};
  p.n_records = uint32_t(records);
  p.min_slots = spec.moe() ? 2 * spec.n_expert_used : 0;
  p.slots = p.n_records;  // all resident until the budget says otherwise
  // A row of every layer per token: the first table to leave the GPU, for a row cache of the rows asked for, or
  // what a dense model's budget leaves (nothing else of it streams), or kGpuRowSlots; at least a batch's ids.
  auto stream_rows = [&](std::optional<uint64_t> budget) {
    const uint64_t rows = t.ple_table->rows(), row_bytes = t.ple_table->row_bytes();
    const uint64_t map = align256(rows * 4);
    r.ple_table = map;
    uint64_t n = kGpuRowSlots;
    if (o.row_slots) {
      n = *o.row_slots;
    } else if (!spec.moe() && budget) {
      const uint64_t rest = p.total_bytes();
      n = *budget > rest ? (*budget - rest) / row_bytes : 0;
    }
    n = std::clamp<uint64_t>(n, std::min<uint64_t>(rows, o.max_batch), rows);
    p.ple_row_slots = uint32_t(n);
    r.ple_table = align256(n * row_bytes) + map;
  };
  if (r.ple_table && o.row_slots) stream_rows(o.budget);
  if (!o.budget || *o.budget >= p.total_bytes()) return p;

  const uint64_t budget = *o.budget;
  if (r.ple_table && !p.ple_row_slots) {
    stream_rows(budget);
    if (budget >= p.total_bytes()) return p;
  }
  if (spec.moe() && t.output != t.token_embd) {
    p.token_embd_on_host = true;
    r.token_embd = 0;
  }
  if (!spec.moe())
    return Error{"GPU budget " + bytes_text(budget) + " cannot hold this dense model, and dense models do not stream " +
                 "on the GPU: it needs " + bytes_text(p.total_bytes()) + " = " + itemize(p)};
  // A streaming session's buffers include those of the expert groups.
  r.work = session_buffers(spec, {.n_ctx = o.n_ctx, .max_batch = o.max_batch, .streams_experts = true,
                                   .dequant_tiles = dequant})
               .shared() +
           own_rest * o.sessions;
  const uint64_t need = r.total() + uint64_t(p.min_slots) * p.record_bytes;
  if (budget < need)
    return Error{"GPU budget " + bytes_text(budget) + " is too small for this model: resident " +
                 format_size(r.total()) + " (" + itemize(p) + ") + " + std::to_string(p.min_slots) +
                 " expert slots of " + format_size(p.record_bytes) + " = " + bytes_text(need) + " at least"};
  p.stream_experts = true;
  // At most every record: with the embeddings in host RAM the experts may all fit.
  p.slots = uint32_t(std::min<uint64_t>((budget - r.total()) / p.record_bytes, p.n_records));
  DF_CHECK(p.slots >= p.min_slots);
  return p;
}

std::optional<uint64_t> automatic_budget(const GpuPlan& all_resident, uint64_t device_bytes, bool can_stream) {
  if (!can_stream || device_bytes == 0 || all_resident.total_bytes() <= device_bytes) return std::nullopt;
  const uint64_t headroom = std::max<uint64_t>(256ull << 20, device_bytes / 20);
  if (device_bytes <= headroom) return std::nullopt;
  return device_bytes - headroom;
}

std::string GpuPlan::describe() const {
  std::string s = "GPU " + mode_name() + ": " +
                  (budget ? "budget " + format_size(*budget) : std::string("no budget")) + ", resident " +
                  format_size(resident.total()) + " (" + itemize(*this) + ")";
  if (n_records) {
    char frac[32];
    std::snprintf(frac, sizeof frac, "%.1f%%", 100.0 * resident_fraction());
    s += ", " + std::to_string(slots) + " expert slots of " + format_size(record_bytes) + " = " +
         format_size(pool_bytes()) + " (" + frac + " of " + std::to_string(n_records) + " experts)";
  }
  return s + ", total " + format_size(total_bytes());
}

nlohmann::json GpuPlan::to_json() const {
  const GpuResident& r = resident;
  nlohmann::json res = {{"context", r.context},     {"token_embd", r.token_embd}, {"output", r.output},
                        {"attention", r.attention}, {"norms", r.norms},           {"routers", r.routers},
                        {"dense_ffn", r.dense_ffn}, {"ple_table", r.ple_table},   {"kv_cache", r.kv_cache},
                        {"recurrent", r.recurrent}, {"work", r.work},
                        {"margin", r.margin},       {"total", r.total()}};
  return {{"mode", mode_name()},
          {"budget", budget ? nlohmann::json(*budget) : nlohmann::json(nullptr)},
          {"n_ctx", n_ctx},
          {"max_batch", max_batch},
          {"resident_bytes", res},
          {"record_bytes", record_bytes},
          {"n_records", n_records},
          {"min_slots", min_slots},
          {"token_embd_on_host", token_embd_on_host},
          {"ple_row_slots", ple_row_slots},
          {"slots", slots},
          {"pool_bytes", pool_bytes()},
          {"resident_fraction", resident_fraction()},
          {"total_bytes", total_bytes()}};
}

}  // namespace df::cuda
