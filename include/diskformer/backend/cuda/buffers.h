// The device buffers of a GPU session, as one table: the session allocates each entry and the GPU planner counts
// them, so the two cannot drift apart. Host code (no CUDA needed): the planner runs in every build.
// Also the sizes of the kernels' workspaces that the table needs (they are the kernels' contracts: kernels.h).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "diskformer/gguf/types.h"
#include "diskformer/model/spec.h"

namespace df::cuda {

// The weight types whose products take Q8_0 activations: Q4_0, Q8_0, the K-quants, IQ4_NL, IQ4_XS, Q4_1, Q5_0, Q5_1.
bool q8_activation_type(gguf::GgmlType weight_type);

// The types whose prefill products (kMmaMinTokens or more vectors) dequantize the weights to f16 tiles of
// kDequantTileRows rows for cuBLAS (matmul.cu says why): q8_activation_type but not Q4_0/Q8_0.
bool dequant_prefill_type(gguf::GgmlType weight_type);
constexpr int64_t kDequantTileRows = 1024;
// That path's workspace: the activations [n_tok][cols] and one tile [kDequantTileRows][cols], both f16.
uint64_t dequant_work_bytes(int64_t cols, int64_t n_tok);

// Q8_0 activations of a product with `cols` columns over n_vec input vectors (34-byte blocks of 32); 0 for float
// weight types, which take f32, f16 or bf16 activations converted in place.
uint64_t q8_scratch_bytes(gguf::GgmlType weight_type, int64_t cols, int64_t n_vec);

// The split attention's workspace for batches of up to n_tok tokens over n_ctx positions: parts of at least
// kAttentionMinPart positions, at most kAttentionMaxSlots (token, part) pairs per head, each holding head_dim_v
// partial sums plus a maximum and a sum.
constexpr int kAttentionMinPart = 16;
constexpr int kAttentionMaxSlots = 128;
uint64_t attention_work_bytes(int64_t n_tok, int n_head, int head_dim_v, int64_t n_ctx);

// The chunked delta rule's matrices for batches of up to n_tok tokens: per chunk of kDeltaChunk tokens and v head,
// T and P (kDeltaChunk x kDeltaChunk each), the cumulative log decays and the update rates.
constexpr int kDeltaChunk = 64;
constexpr int64_t kDeltaChunkWorkFloats = 2 * kDeltaChunk * kDeltaChunk + 2 * kDeltaChunk;
uint64_t gated_delta_rule_work_bytes(int64_t n_tok, int n_v_heads);

// moe_plan's tiles for n_slots (token, slot) pairs over n_expert experts: each expert with c slots makes at most
// c / tile_slots + 1 tiles.
int64_t moe_max_tiles(int64_t n_slots, int32_t n_expert, int32_t tile_slots = 8);
// The tile size for a weight type: 32 for the q8_activation_types (the tensor-core path), 8 for the float types. A
// plan serves the gate, up and down products alike, so a layer takes the smallest over its three types.
int32_t moe_tile_slots(gguf::GgmlType weight_type);
// The types of the int8 tensor-core kernels (mmq.cu): every q8_activation_type.
bool int8_mma_type(gguf::GgmlType weight_type);

enum class Buf : int {
  k_cache,     // per layer with a cache of its own [n_ctx][its kv_dim_k] f16, at kv_layout's offsets
  v_cache,     // the same of [its kv_dim_v]
  rope,        // [n_ctx][n_rot / 2][cos, sin] f32
  tok, pos,    // [max_batch] int32
  x, xn, proj,  // [max_batch][n_embd] f32: residual, normed input, sublayer output
  q, k, v,     // [max_batch][q_dim | kv_dim_k | kv_dim_v] f32
  attn,        // [max_batch][n_head * head_dim_v] f32
  attn_work,   // attention_work_bytes
  gate, up,    // [max_batch][max(n_ff, n_used * n_ff_expert)] f32
  router,      // [max_batch][n_expert] f32
  ids, wts,    // [max_batch][n_used] int32 / f32: the router's choices
  expert_out,  // [max_batch][n_used][n_embd] f32
  order,       // [max_batch * n_used] int32: moe_plan's order (grouped experts)
  tiles,       // [1 + 3 * moe_max_tiles(max_batch * n_used, n_expert)] int32
  gathered,    // [max_batch * n_used][max(n_embd, n_ff_expert)] f32: grouped inputs in plan order
  scratch,     // Q8_0 activations of the widest product over max_batch * n_used vectors
  logits,      // [n_vocab] f32 (grown by evals that keep every token's logits)
  next,        // [1] int32: argmax
  // Streamed experts only:
  act,         // [max_batch * n_used][n_ff_expert] f32: SwiGLU outputs
  plan,        // one group's plan: [nk] local ids, [nk] slot map, [nk] order, tiles; fused decode: 3 nk
  xq_stream,   // [max_batch][n_embd / 32] Q8_0 blocks of xn
  guess,       // decode's look-ahead: [n_embd] normed row, [n_expert] router logits, [n_used] ids and weights
  // Dense weights of a dequant_prefill_type only:
  dequant,     // dequant_work_bytes(the widest input, max_batch)
  // gemma4 only:
  rope_swa,    // the sliding layers' RoPE table, as rope (the full layers')
  ffn_out,     // [max_batch][n_embd] f32: the dense MLP's output beside the experts
  moe_out,     // [max_batch][n_embd] f32: the routed experts' weighted sum
  ple,         // [max_batch][n_layer][n_embd_per_layer] f32: the per-layer inputs
  ple_rows,    // the same: the per-layer table's rows of the batch's tokens
  ple_gate,    // [max_batch][n_embd_per_layer] f32
  // qwen35moe only (the state's two: where it has DeltaNet layers):
  q_gate,      // [max_batch][n_head][2][head_dim_k] f32: the attention layers' queries, each head's gate after it
  ssm_mixed,   // [max_batch][conv_dim] f32: the DeltaNet layers' q, k, v projections
  ssm_conv,    // [max_batch][conv_dim] f32: the same after the convolution, SiLU and the q/k L2 norms
  ssm_z,       // [max_batch][v_dim] f32: the output gate's projections
  ssm_alpha, ssm_beta,  // [max_batch][n_v_heads] f32: the decay's and the update rate's projections
  ssm_core,    // [max_batch][v_dim] f32: the delta rule's outputs, then gated-normed
  ssm_chunks,  // gated_delta_rule_work_bytes(max_batch, n_v_heads): the chunked delta rule's matrices
  sh_logit,    // [max_batch] f32: the shared expert's gate logits
  rec_state,   // recurrent_state_bytes: the DeltaNet layers' state, updated by every eval
  rec_save,    // recurrent_state_bytes: the state at a position inside a batch (a sequence's copies)
  count
};
constexpr int kBufCount = int(Buf::count);
const char* buf_name(Buf b);
// A session's own buffers: its KV cache, recurrent state, RoPE tables and logits, which outlive an eval. Every other
// one is work inside an eval, which the sessions of one model share (they run one at a time on its stream).
bool session_own(Buf b);

// Where each layer's keys and values start in Buf::k_cache / Buf::v_cache (f16 elements): layers in order, each
// with n_ctx rows of its own width; a layer that reads another's cache (gemma4's shared KV) has its offsets; a
// DeltaNet layer has none (its offsets are the next layer's).
struct KvLayout {
  std::vector<uint64_t> k, v;  // [n_layer]
  uint64_t k_elems = 0, v_elems = 0;
};
KvLayout kv_layout(const model::ModelSpec& spec, uint32_t n_ctx);

struct SessionShape {
  uint32_t n_ctx = 4096;
  uint32_t max_batch = 512;
  bool grouped_experts = true;
  bool streams_experts = false;
  bool dequant_tiles = false;  // a dense product's weights are of a dequant_prefill_type (Buf::dequant)
};

struct BufferTable {
  std::array<uint64_t, kBufCount> bytes{};  // 0: not allocated
  uint64_t operator[](Buf b) const { return bytes[size_t(b)]; }
  uint64_t total() const;
  uint64_t own() const;  // session_own's
  uint64_t shared() const { return total() - own(); }
};

BufferTable session_buffers(const model::ModelSpec& spec, const SessionShape& shape);

// A hybrid model's recurrent state as the GPU keeps it, laid out as cpu::RecurrentState's two vectors one after the
// other: conv [n_recurrent][conv_kernel - 1][conv_dim], then ssm [n_recurrent][n_v_heads][head_dim][head_dim], f32.
// 0 for models without recurrent layers.
uint64_t recurrent_conv_floats(const model::ModelSpec& spec);
uint64_t recurrent_state_bytes(const model::ModelSpec& spec);

}  // namespace df::cuda
