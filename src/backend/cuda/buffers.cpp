#include "diskformer/backend/cuda/buffers.h"

#include <algorithm>

namespace df::cuda {

namespace {
constexpr uint64_t kQ8Bytes = 34;  // one Q8_0 block: f16 scale + 32 int8
}  // namespace

bool q8_activation_type(gguf::GgmlType t) {
  using gguf::GgmlType;
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q8_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::IQ4_NL:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: return true;
    default: return false;
  }
}

bool dequant_prefill_type(gguf::GgmlType t) {
  return q8_activation_type(t) && t != gguf::GgmlType::Q4_0 && t != gguf::GgmlType::Q8_0;
}

uint64_t dequant_work_bytes(int64_t cols, int64_t n_tok) {
  return uint64_t(cols) * uint64_t(n_tok + kDequantTileRows) * 2;
}

uint64_t q8_scratch_bytes(gguf::GgmlType t, int64_t cols, int64_t n_vec) {
  return q8_activation_type(t) ? uint64_t(cols / 32) * kQ8Bytes * uint64_t(n_vec) : 0;
}

uint64_t attention_work_bytes(int64_t n_tok, int n_head, int head_dim_v, int64_t n_ctx) {
  if (n_tok <= 0 || n_ctx <= 0) return 0;
  // A batch of n <= n_tok tokens uses n * (its split) <= this many parts per head.
  const int64_t parts = (n_ctx + kAttentionMinPart - 1) / kAttentionMinPart;
  const int64_t slots = std::min<int64_t>(kAttentionMaxSlots, std::min<int64_t>(n_tok, kAttentionMaxSlots) * parts);
  return uint64_t(n_head) * uint64_t(slots) * uint64_t(head_dim_v + 2) * 4;
}

uint64_t gated_delta_rule_work_bytes(int64_t n_tok, int n_v_heads) {
  if (n_tok <= 0) return 0;
  return uint64_t((n_tok + kDeltaChunk - 1) / kDeltaChunk) * uint64_t(n_v_heads) * kDeltaChunkWorkFloats * 4;
}

int64_t moe_max_tiles(int64_t n_slots, int32_t n_expert, int32_t tile_slots) {
  // Each expert with c slots makes ceil(c / T) <= floor(c / T) + 1 tiles, the floors sum to at most n_slots / T, and
  // at most min(n_expert, n_slots) experts have slots.
  return n_slots / std::max(tile_slots, 1) + std::min<int64_t>(n_expert, n_slots);
}

int32_t moe_tile_slots(gguf::GgmlType t) { return q8_activation_type(t) ? 32 : 8; }

bool int8_mma_type(gguf::GgmlType t) { return q8_activation_type(t); }

const char* buf_name(Buf b) {
  static const char* const names[kBufCount] = {
      "KV cache (keys)", "KV cache (values)", "RoPE table", "token ids", "positions", "residual stream",
      "normed activations", "sublayer outputs", "queries", "keys", "values", "attention outputs",
      "attention partial results", "gate activations", "up activations", "router logits", "expert ids",
      "expert weights", "expert outputs", "expert order", "expert tiles", "expert inputs",
      "quantized activations", "logits", "the next token", "streamed experts' activations",
      "streamed experts' plans", "streamed experts' quantized inputs", "look-ahead routing",
      "dequantized weight tiles", "sliding layers' RoPE table", "dense FFN outputs", "expert sums",
      "per-layer inputs", "per-layer embedding rows", "per-layer input gates", "gated queries",
      "DeltaNet projections", "DeltaNet convolution outputs", "DeltaNet output gates", "DeltaNet decay inputs",
      "DeltaNet update rates", "DeltaNet outputs", "DeltaNet chunk matrices", "shared expert gates",
      "recurrent state", "recurrent state copy"};
  return names[int(b)];
}

uint64_t BufferTable::total() const {
  uint64_t t = 0;
  for (uint64_t b : bytes) t += b;
  return t;
}

bool session_own(Buf b) {
  switch (b) {
    case Buf::k_cache: case Buf::v_cache: case Buf::rope: case Buf::rope_swa: case Buf::logits:
    case Buf::rec_state: case Buf::rec_save:
      return true;
    default:
      return false;
  }
}

uint64_t BufferTable::own() const {
  uint64_t t = 0;
  for (int b = 0; b < kBufCount; ++b)
    if (session_own(Buf(b))) t += bytes[size_t(b)];
  return t;
}

KvLayout kv_layout(const model::ModelSpec& s, uint32_t n_ctx) {
  KvLayout l;
  l.k.resize(s.n_layer);
  l.v.resize(s.n_layer);
  for (uint32_t il = 0; il < s.n_layer; ++il) {
    const model::LayerSpec ls = s.layer(il);
    if (!s.layers.empty() && ls.kv_layer != il) {  // reads an earlier layer's cache
      l.k[il] = l.k[ls.kv_layer], l.v[il] = l.v[ls.kv_layer];
      continue;
    }
    l.k[il] = l.k_elems, l.v[il] = l.v_elems;
    if (s.is_recurrent(il)) continue;  // a DeltaNet layer: no cache
    l.k_elems += uint64_t(n_ctx) * ls.kv_dim_k();
    l.v_elems += uint64_t(n_ctx) * ls.kv_dim_v();
  }
  return l;
}

BufferTable session_buffers(const model::ModelSpec& s, const SessionShape& sh) {
  BufferTable t;
  auto set = [&](Buf b, uint64_t n) { t.bytes[size_t(b)] = n; };
  const uint64_t B = std::min(sh.max_batch, sh.n_ctx), C = sh.n_ctx, E = s.n_embd;
  const uint64_t K = std::max<uint32_t>(s.n_expert_used, 1), nk = B * K;
  const uint64_t ff = std::max<uint64_t>({s.n_ff, uint64_t(s.n_expert_used) * s.n_ff_expert, s.n_ff_shared});
  // Layers with a cache of their own (a hybrid's DeltaNet layers have none; the forward indexes the others in order).
  const KvLayout kv = kv_layout(s, sh.n_ctx);
  set(Buf::k_cache, kv.k_elems * 2);
  set(Buf::v_cache, kv.v_elems * 2);
  set(Buf::rope, std::max<uint64_t>(C * (s.n_rot / 2) * 2 * 4, 4));
  set(Buf::tok, B * 4);
  set(Buf::pos, B * 4);
  for (Buf b : {Buf::x, Buf::xn, Buf::proj}) set(b, B * E * 4);
  set(Buf::q, B * s.q_dim() * 4);
  set(Buf::k, B * s.kv_dim_k() * 4);
  set(Buf::v, B * s.kv_dim_v() * 4);
  set(Buf::attn, B * s.n_head * s.head_dim_v * 4);
  set(Buf::attn_work, attention_work_bytes(int64_t(B), int(s.n_head), int(s.head_dim_v), int64_t(C)));
  set(Buf::gate, B * ff * 4);
  set(Buf::up, B * ff * 4);
  if (s.moe()) {
    set(Buf::router, B * s.n_expert * 4);
    set(Buf::ids, nk * 4);
    set(Buf::wts, nk * 4);
    set(Buf::expert_out, nk * E * 4);
    if (sh.grouped_experts || sh.streams_experts) {
      set(Buf::order, nk * 4);
      set(Buf::tiles, (1 + 3 * uint64_t(moe_max_tiles(int64_t(nk), int32_t(s.n_expert)))) * 4);
      set(Buf::gathered, nk * std::max<uint64_t>(E, s.n_ff_expert) * 4);
    }
  }
  // The widest input of any product, for the most input vectors (the experts' down projection has B * K).
  const uint64_t max_cols = std::max<uint64_t>({E, uint64_t(s.n_head) * s.head_dim_v, s.n_ff, s.n_ff_expert,
                                                 s.n_ff_shared, s.delta_net.v_dim()});
  set(Buf::scratch, (max_cols / 32 + 1) * kQ8Bytes * nk);
  if (sh.dequant_tiles) set(Buf::dequant, dequant_work_bytes(int64_t(max_cols), int64_t(B)));
  set(Buf::logits, uint64_t(s.n_vocab) * 4);
  if (s.family == model::Family::kGemma4) {
    uint32_t rot_swa = 0;
    for (const model::LayerSpec& l : s.layers)
      if (l.sliding) rot_swa = std::max(rot_swa, l.n_rot);
    set(Buf::rope_swa, std::max<uint64_t>(C * (rot_swa / 2) * 2 * 4, 4));
    set(Buf::ffn_out, B * E * 4);
    if (s.moe()) set(Buf::moe_out, B * E * 4);
    if (s.n_embd_per_layer) {
      const uint64_t LP = uint64_t(s.n_layer) * s.n_embd_per_layer;
      set(Buf::ple, B * LP * 4);
      set(Buf::ple_rows, B * LP * 4);
      set(Buf::ple_gate, B * s.n_embd_per_layer * 4);
    }
  }
  set(Buf::next, 4);
  if (s.moe() && sh.streams_experts) {
    set(Buf::act, nk * s.n_ff_expert * 4);
    set(Buf::plan, (3 * nk + 1 + 3 * uint64_t(moe_max_tiles(int64_t(nk), int32_t(nk), 1))) * 4);
    set(Buf::xq_stream, (E / 32) * kQ8Bytes * B);
    set(Buf::guess, (E + s.n_expert + 2 * K) * 4);
  }
  if (s.family == model::Family::kQwen35Moe) {
    const model::DeltaNetSpec& d = s.delta_net;
    set(Buf::q_gate, B * 2 * s.q_dim() * 4);
    set(Buf::ssm_mixed, B * d.conv_dim() * 4);
    set(Buf::ssm_conv, B * d.conv_dim() * 4);
    set(Buf::ssm_z, B * d.v_dim() * 4);
    set(Buf::ssm_alpha, B * d.n_v_heads * 4);
    set(Buf::ssm_beta, B * d.n_v_heads * 4);
    set(Buf::ssm_core, B * d.v_dim() * 4);
    set(Buf::ssm_chunks, gated_delta_rule_work_bytes(int64_t(B), int(d.n_v_heads)));
    set(Buf::sh_logit, B * 4);
    set(Buf::rec_state, recurrent_state_bytes(s));
    set(Buf::rec_save, recurrent_state_bytes(s));
  }
  return t;
}

uint64_t recurrent_conv_floats(const model::ModelSpec& s) {
  if (s.n_recurrent() == 0) return 0;
  return uint64_t(s.n_recurrent()) * (s.delta_net.conv_kernel - 1) * s.delta_net.conv_dim();
}

uint64_t recurrent_state_bytes(const model::ModelSpec& s) {
  const model::DeltaNetSpec& d = s.delta_net;
  return (recurrent_conv_floats(s) + uint64_t(s.n_recurrent()) * d.n_v_heads * d.head_dim * d.head_dim) * 4;
}

}  // namespace df::cuda
