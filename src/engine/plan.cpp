#include "diskformer/engine/plan.h"

#include <sys/sysinfo.h>

#include <algorithm>

#include "diskformer/backend/cpu/kv_cache.h"
#include "diskformer/util/check.h"
#include "diskformer/util/size.h"
#include "engine/hybrid_sequence.h"

namespace df::engine {

const char* residency_name(Residency r) {
  switch (r) {
    case Residency::kAllResident: return "all resident";
    case Residency::kStreamExperts: return "experts streamed";
    case Residency::kStreamLayers: return "layers streamed";
  }
  return "?";
}

namespace {

constexpr uint64_t kPage = 4096;

// The CPU forward's buffers at a batch of n tokens (backend/cpu/forward.h: the residual, norms, q/k/v, attention
// output, the FFN's or the experts' rows, their scratch; a hybrid model's gated queries and DeltaNet channels), the
// products' converted activations (at most 4 bytes an
// element, every job of a matmul_many in its own region), one row of logits and the sampler's (logit, id) pairs.
uint64_t work_estimate(const model::ModelSpec& s, uint32_t n_ctx, uint32_t n_batch) {
  const uint64_t n = std::max<uint64_t>(1, std::min(n_ctx, n_batch));
  const uint64_t E = s.n_embd, K = s.n_expert_used, Fe = s.n_ff_expert;
  const uint64_t q_rows = uint64_t(s.q_dim()) * (s.attn_gate ? 2 : 1), conv = s.delta_net.conv_dim();
  uint64_t per_token = 3 * E + q_rows + s.kv_dim_k() + s.kv_dim_v() + uint64_t(s.n_head) * s.head_dim_v + 2 * conv;
  uint64_t widest_job = std::max<uint64_t>({E, q_rows, s.n_ff, conv});
  if (s.moe()) {
    // router, expert outputs, gathered inputs and outputs, SwiGLU; a shared expert's gate and up
    per_token += s.n_expert + 3 * K * E + 2 * K * Fe + 2 * uint64_t(s.n_ff_shared);
    widest_job = std::max(widest_job, K * std::max(E, Fe));
  } else {
    per_token += 2 * uint64_t(s.n_ff);
  }
  const uint64_t activations = 3 * 4 * n * widest_job;  // q, k and v (or gate and up) converted side by side
  return 4 * n * per_token + activations + uint64_t(s.n_vocab) * (4 + 8);
}

// " x 4 sequences" where the plan holds more than one.
std::string sessions_text(uint32_t n) { return n > 1 ? " x " + std::to_string(n) + " sequences" : std::string(); }

uint64_t place_piece(uint64_t at, uint64_t file_offset, uint64_t length) {
  constexpr uint64_t kBig = 256 << 10, kPack = 64;
  if (length >= kBig) return (at + kPage - 1) / kPage * kPage + file_offset % kPage;
  return (at + kPack - 1) / kPack * kPack;
}

}  // namespace

ArenaLayout arena_layout(const store::RecordMap& map, std::span<const gguf::TensorInfo* const> tensors) {
  ArenaLayout a;
  for (const gguf::TensorInfo* t : tensors) {
    if (std::any_of(a.at.begin(), a.at.end(), [&](const auto& p) { return p.first == t; })) continue;
    const std::optional<store::ByteRange> r = map.tensor(t->name);
    DF_CHECK(r.has_value());  // arena tensors lie outside the expert records in every map
    const uint64_t off = place_piece(a.bytes, r->offset, r->length);
    a.at.push_back({t, off});
    a.bytes = off + r->length;
  }
  return a;
}

std::vector<const gguf::TensorInfo*> arena_tensors(const model::ModelTensors& t, bool with_layers,
                                                   bool with_ple_table, bool with_token_embd) {
  std::vector<const gguf::TensorInfo*> list;
  if (with_token_embd) list.push_back(t.token_embd);
  list.push_back(t.output_norm);
  if (t.output != t.token_embd) list.push_back(t.output);
  for (auto* g : t.globals()) list.push_back(g);
  if (t.ple_table && with_ple_table) list.push_back(t.ple_table);
  if (with_layers)
    for (const auto& l : t.layers)
      for (auto* x : l.dense()) list.push_back(x);
  return list;
}

std::vector<const gguf::TensorInfo*> arena_tensors(const model::ModelTensors& t, const WeightPlan& p) {
  return arena_tensors(t, p.mode != Residency::kStreamLayers, !p.ple.streams(), !p.tokens.streams());
}

std::string WeightPlan::describe() const {
  std::string s = std::string(residency_name(mode)) + ": resident " + format_size(resident_bytes);
  if (records_resident()) {
    s += " + " + std::to_string(slots) + " expert records of " + format_size(record_bytes);
  } else if (slots) {
    s += ", " + std::to_string(slots) + " slots of " + format_size(record_bytes);
  }
  if (ple.table_bytes) {
    s += ple.streams() ? ", per-layer embedding table on disk through " + std::to_string(ple.slots) + " rows of " +
                             format_size(ple.row_bytes)
                       : ", per-layer embedding table resident (" + format_size(ple.table_bytes) + ")";
  }
  if (tokens.streams())
    s += ", token embeddings on disk through " + std::to_string(tokens.slots) + " rows of " + format_size(tokens.row_bytes);
  s += ", KV cache " + format_size(kv_bytes) + " at " + std::to_string(n_ctx) + " positions" + sessions_text(sessions);
  if (state_bytes) s += ", recurrent state " + format_size(state_bytes);
  s += ", work " + format_size(work_bytes);
  if (!kv_in_ram) s += " (on the GPU)";
  return s + " (model " + format_size(model_bytes) + ")";
}

namespace {

std::string bytes_text(uint64_t n) { return format_size(n) + " (" + std::to_string(n) + " bytes)"; }

// "resident weights 10.2 MiB + KV cache 8.0 GiB at 16777216 positions + work buffers 5.1 MiB": the fixed part.
std::string fixed_text(const WeightPlan& p) {
  std::string s = "resident weights " + format_size(p.resident_bytes);
  if (p.kv_in_ram) {
    s += " + KV cache " + format_size(p.kv_bytes) + " at " + std::to_string(p.n_ctx) + " positions" + sessions_text(p.sessions);
    if (p.state_bytes) s += " + recurrent state " + format_size(p.state_bytes);
    s += " + work buffers " + format_size(p.work_bytes);
  }
  return s;
}

// Where the KV cache is what does not fit, a smaller -c is the way out.
std::string ctx_hint(const WeightPlan& p, uint64_t limit) {
  return p.kv_in_ram && p.kv_bytes > limit / 2 ? " (the KV cache grows with -c: a smaller context needs less)" : "";
}

}  // namespace

Result<WeightPlan> plan_weights(const ModelFiles& m, const RamPlanOptions& o) {
  const model::ModelSpec& spec = m.spec;
  WeightPlan p;
  p.n_ctx = o.n_ctx;
  p.model_bytes = m.tensor_bytes;
  p.sessions = std::max<uint32_t>(1, o.sessions);
  p.kv_bytes = cpu::KvCache::bytes_for(spec, o.n_ctx) * p.sessions;
  p.state_bytes = (spec.n_recurrent() ? hybrid_state_bytes(spec) : 0) * p.sessions;
  p.work_bytes = work_estimate(spec, o.n_ctx, o.n_batch) * p.sessions;
  p.kv_in_ram = o.kv_in_ram;
  const bool moe = spec.moe();
  const uint64_t expert_records = moe ? uint64_t(spec.n_layer) * spec.n_expert : 0;
  if (expert_records > UINT32_MAX)
    return Error{m.path + ": " + std::to_string(expert_records) + " expert records are more than a tier indexes"};
  const std::optional<uint64_t> budget = o.budget;
  const bool stream_layers = budget && !moe;
  const gguf::TensorInfo* ple = m.tensors.ple_table;
  // Under a budget the token embeddings may stream too, where the head does not read all of them every token.
  const gguf::TensorInfo* tokens =
      budget && o.token_rows && m.tensors.output != m.tensors.token_embd ? m.tensors.token_embd : nullptr;
  p.resident_bytes = arena_layout(m.records, arena_tensors(m.tensors, !stream_layers, !budget, !tokens)).bytes;
  const std::pair<RowTablePlan*, const gguf::TensorInfo*> tables[] = {{&p.ple, ple}, {&p.tokens, tokens}};
  for (const auto& [r, t] : tables)
    if (t) {
      r->table_bytes = t->n_bytes;
      r->row_bytes = t->row_bytes();
    }
  if (moe) {
    p.record_bytes = m.layouts.expert_record_bytes;
    p.n_records = uint32_t(expert_records);
    p.min_slots = 2 * spec.n_expert_used;
  } else if (stream_layers) {
    p.record_bytes = m.layouts.layer_record_bytes;
    p.n_records = spec.n_layer;
    p.min_slots = 2;  // the layer computing and the next one being read
  }
  p.slot_bytes = (p.record_bytes + kPage - 1) / kPage * kPage;
  if (!budget) {
    p.slots = p.n_records;  // a MoE model's experts all in RAM; a dense model has no tier
    if (o.machine_ram && p.total_bytes() > *o.machine_ram)
      return Error{"this model at -c " + std::to_string(o.n_ctx) + " needs " + bytes_text(p.total_bytes()) +
                   " of RAM (" + fixed_text(p) +
                   (p.slots ? " + " + std::to_string(p.slots) + " expert records of " + format_size(p.slot_bytes) : "") +
                   "), more than this machine's " + bytes_text(*o.machine_ram) + ctx_hint(p, *o.machine_ram) +
                   "; --ram-budget streams the weights from disk instead"};
    return p;
  }
  p.mode = moe ? Residency::kStreamExperts : Residency::kStreamLayers;
  std::string rows_text;
  uint64_t row_reserve = 0;
  for (const auto& [r, t] : tables) {
    if (!t) continue;
    r->min_slots = uint32_t(std::min<uint64_t>(kMinRowSlots, t->rows()));
    row_reserve += uint64_t(r->min_slots) * r->row_bytes;
    rows_text += " + " + std::to_string(r->min_slots) + (r == &p.ple ? " per-layer" : " token") + " embedding rows of " +
                 format_size(r->row_bytes);
  }
  const uint64_t need = p.min_budget();
  if (*budget < need)
    return Error{"RAM budget " + bytes_text(*budget) + " is too small for this model at -c " + std::to_string(o.n_ctx) +
                 ": " + fixed_text(p) + " + " + std::to_string(p.min_slots) + " slots of " +
                 format_size(p.slot_bytes) + rows_text + " = " + bytes_text(need) + " at least" + ctx_hint(p, *budget)};
  // The tier's slots first (a layer or expert missed costs far more than a row), then each table where it fits in
  // the arena, else its rows take what is left (the per-layer table first, the later one's fewest rows kept back).
  p.slots = uint32_t(std::min<uint64_t>(p.n_records, (*budget - p.fixed_bytes() - row_reserve) / p.slot_bytes));
  uint64_t left = *budget - p.fixed_bytes() - uint64_t(p.slots) * p.slot_bytes;
  bool in_arena[2] = {false, false};
  for (int i = 0; i < 2; ++i) {
    const auto& [r, t] = tables[i];
    if (!t) continue;
    row_reserve -= uint64_t(r->min_slots) * r->row_bytes;  // now the later tables' only
    in_arena[i] = true;
    const uint64_t with =
        arena_layout(m.records, arena_tensors(m.tensors, !stream_layers, in_arena[0], in_arena[1] || !tokens)).bytes;
    if (with - p.resident_bytes + row_reserve <= left) {
      r->in_arena = with - p.resident_bytes;
      left -= r->in_arena;
      p.resident_bytes = with;
    } else {
      in_arena[i] = false;
      r->slots = uint32_t(std::min<uint64_t>(t->rows(), (left - row_reserve) / r->row_bytes));
      left -= uint64_t(r->slots) * r->row_bytes;
    }
  }
  return p;
}

std::optional<uint64_t> machine_ram_bytes() {
  struct sysinfo si {};
  if (::sysinfo(&si) != 0 || si.totalram == 0) return std::nullopt;
  return uint64_t(si.totalram) * std::max<uint64_t>(1, si.mem_unit);
}

}  // namespace df::engine
