#include "diskformer/engine/gpu_plan.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "diskformer/util/check.h"
#include "diskformer/util/size.h"

namespace df::engine {

namespace {

uint64_t align256(uint64_t n) { return (n + 255) / 256 * 256; }

// Bytes of a tensor as the GPU holds it (rows x row_bytes), 0 for an absent one.
uint64_t gpu_bytes(const gguf::TensorInfo* t) { return t ? align256(t->rows() * t->row_bytes()) : 0; }

// One expert of a stacked [n_expert][rows] x [cols] tensor.
uint64_t expert_piece(const gguf::TensorInfo* t) {
  const uint64_t n = t->shape.back();
  return align256(t->rows() / n * t->row_bytes());
}

// attention.cu's split-attention workspace: parts of at least 16 positions, at most 128 (token, part) pairs per head,
// each holding head_dim_v partial sums plus a maximum and a sum.
uint64_t attention_work(uint64_t n_tok, uint64_t n_head, uint64_t head_dim_v, uint64_t n_ctx) {
  if (n_tok == 0 || n_ctx == 0) return 0;
  const uint64_t parts = std::min<uint64_t>(128, std::min<uint64_t>(n_tok, 128) * ((n_ctx + 15) / 16));
  return n_head * parts * (head_dim_v + 2) * 4;
}

// moe_plan.cu's tile bound: each expert with c of the n_slots slots makes at most c / 8 + 1 tiles of 8.
uint64_t moe_max_tiles(uint64_t n_slots, uint64_t n_expert) { return n_slots / 8 + std::min(n_expert, n_slots); }

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
  s += ", KV cache " + format_size(r.kv_cache) + " at " + std::to_string(p.n_ctx) + " positions, work buffers " +
       format_size(r.work) + " for batches of " + std::to_string(p.max_batch) + ", margin " + format_size(r.margin);
  return s;
}

std::string bytes_text(uint64_t n) { return format_size(n) + " (" + std::to_string(n) + " bytes)"; }

}  // namespace

uint64_t gpu_kv_bytes(const model::ModelSpec& s, uint32_t n_ctx) {
  return uint64_t(s.n_layer) * n_ctx * (uint64_t(s.kv_dim_k()) + s.kv_dim_v()) * 2;
}

uint64_t gpu_session_bytes(const model::ModelSpec& s, uint32_t n_ctx, uint32_t max_batch) {
  // Buffer for buffer as GpuSession::allocate(), grouped experts on.
  const uint64_t B = max_batch, C = n_ctx, E = s.n_embd;
  const uint64_t K = std::max<uint32_t>(s.n_expert_used, 1);
  const uint64_t ff = std::max<uint64_t>(s.n_ff, uint64_t(s.n_expert_used) * s.n_ff_expert);
  uint64_t n = gpu_kv_bytes(s, n_ctx);
  n += std::max<uint64_t>(C * (s.n_rot / 2) * 2 * 4, 1);  // RoPE table (to_device allocates 1 byte when empty)
  n += 2 * B * 4;                                         // token ids, positions
  n += 3 * B * E * 4;                                     // x, xn, proj
  n += B * (uint64_t(s.q_dim()) + s.kv_dim_k() + s.kv_dim_v() + uint64_t(s.n_head) * s.head_dim_v) * 4;  // q k v attn
  n += attention_work(B, s.n_head, s.head_dim_v, C);     // split-attention partial results
  n += 2 * B * ff * 4;                                    // gate, up
  if (s.moe()) {
    n += B * s.n_expert * 4;                              // router logits
    n += B * K * 4 * 2;                                   // expert ids, weights
    n += B * K * E * 4;                                   // expert outputs
    n += B * K * 4;                                       // expert order
    n += (1 + 3 * moe_max_tiles(B * K, s.n_expert)) * 4;  // expert tiles
    n += B * K * std::max<uint64_t>(E, s.n_ff_expert) * 4;  // gathered expert inputs
  }
  const uint64_t max_cols = std::max<uint64_t>({E, uint64_t(s.n_head) * s.head_dim_v, s.n_ff, s.n_ff_expert});
  n += (max_cols / 32 + 1) * 34 * B * K;  // Q8_0 activations
  n += uint64_t(s.n_vocab) * 4;           // logits of one token
  n += 4;                                 // argmax result
  return n;
}

Result<GpuPlan> plan_gpu(const model::ModelSpec& spec, const model::ModelTensors& t, const GpuPlanOptions& o) {
  DF_CHECK(t.layers.size() == spec.n_layer);
  GpuPlan p;
  p.budget = o.budget;
  p.n_ctx = o.n_ctx;
  p.max_batch = o.max_batch;
  GpuResident& r = p.resident;
  r.context = o.context_bytes;
  r.token_embd = gpu_bytes(t.token_embd);
  r.output = t.output == t.token_embd ? 0 : gpu_bytes(t.output);
  r.norms = gpu_bytes(t.output_norm);
  for (const auto& l : t.layers) {
    for (auto* w : {l.wq, l.wk, l.wv, l.wo}) r.attention += gpu_bytes(w);
    for (auto* w : {l.attn_norm, l.ffn_norm, l.q_norm, l.k_norm}) r.norms += gpu_bytes(w);
    for (auto* w : {l.ffn_gate, l.ffn_up, l.ffn_down}) r.dense_ffn += gpu_bytes(w);
    r.routers += gpu_bytes(l.gate_inp);
    if (l.moe())
      p.record_bytes = std::max(p.record_bytes, expert_piece(l.gate_exps) + expert_piece(l.up_exps) +
                                                    expert_piece(l.down_exps));
  }
  const uint64_t session = gpu_session_bytes(spec, o.n_ctx, o.max_batch);
  r.kv_cache = gpu_kv_bytes(spec, o.n_ctx);
  r.work = session - r.kv_cache;
  r.margin = kGpuMarginBytes;
  const uint64_t records = spec.moe() ? uint64_t(spec.n_layer) * spec.n_expert : 0;
  if (records > (1u << 31))
    return Error{"GPU plan: " + std::to_string(spec.n_layer) + " layers x " + std::to_string(spec.n_expert) +
                 " experts are more expert records than a slot pool indexes (2^31)"};
  p.n_records = uint32_t(records);
  p.min_slots = spec.moe() ? 2 * spec.n_expert_used : 0;
  p.slots = p.n_records;  // all resident until the budget says otherwise
  if (!o.budget || *o.budget >= p.total_bytes()) return p;

  const uint64_t budget = *o.budget;
  if (spec.moe() && t.output != t.token_embd) {
    p.token_embd_on_host = true;
    r.token_embd = 0;
  }
  if (!spec.moe())
    return Error{"GPU budget " + bytes_text(budget) + " cannot hold this dense model, and dense models do not stream " +
                 "on the GPU: it needs " + bytes_text(p.total_bytes()) + " = " + itemize(p)};
  const uint64_t need = r.total() + uint64_t(p.min_slots) * p.record_bytes;
  if (budget < need)
    return Error{"GPU budget " + bytes_text(budget) + " is too small for this model: resident " +
                 format_size(r.total()) + " (" + itemize(p) + ") + " + std::to_string(p.min_slots) +
                 " expert slots of " + format_size(p.record_bytes) + " = " + bytes_text(need) + " at least"};
  p.mode = Residency::kStreamExperts;
  // At most every record: with the embeddings in host RAM the experts may all fit.
  p.slots = uint32_t(std::min<uint64_t>((budget - r.total()) / p.record_bytes, p.n_records));
  DF_CHECK(p.slots >= p.min_slots);
  return p;
}

std::string GpuPlan::describe() const {
  std::string s = std::string("GPU ") + residency_name(mode) + ": " +
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
                        {"dense_ffn", r.dense_ffn}, {"kv_cache", r.kv_cache},     {"work", r.work},
                        {"margin", r.margin},       {"total", r.total()}};
  return {{"mode", residency_name(mode)},
          {"budget", budget ? nlohmann::json(*budget) : nlohmann::json(nullptr)},
          {"n_ctx", n_ctx},
          {"max_batch", max_batch},
          {"resident_bytes", res},
          {"record_bytes", record_bytes},
          {"n_records", n_records},
          {"min_slots", min_slots},
          {"token_embd_on_host", token_embd_on_host},
          {"slots", slots},
          {"pool_bytes", pool_bytes()},
          {"resident_fraction", resident_fraction()},
          {"total_bytes", total_bytes()}};
}

}  // namespace df::engine
