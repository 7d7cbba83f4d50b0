// The CUDA kernels of the forward pass behind typed launch wrappers. Every wrapper checks its arguments (DF_CHECK),
// launches on the given stream and checks the launch; pointers are device memory unless a field says otherwise.
// Each kernel reproduces the arithmetic of its CPU reference in include/diskformer/backend/cpu/ (ops.h, kernels.h);
// where the summation order differs (dot products, reductions) tests/gpu states the tolerance.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "diskformer/backend/cuda/buffers.h"
#include "diskformer/gguf/types.h"
#include "diskformer/model/mat.h"
#include "diskformer/model/spec.h"

namespace df::cuda {

// Workspace sizes (q8_scratch_bytes, attention_work_bytes, moe_max_tiles, moe_tile_slots) are in buffers.h.

// Weight types the matrix products (and get_rows) take: F32, F16, BF16, Q8_0, Q4_0, and the types whose 32-element
// pieces kquant.cuh decodes: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (rows a multiple of 256), IQ4_NL, Q4_1, Q5_0,
// Q5_1 (of 32). Those take the Q8_0 activations too (q8_activation_type), the fused decode kernels, and the int8
// tensor cores for their routed experts' tiles of 32 slots (mmq.cu) and for dense batches without a dequantization
// workspace (with one: f16 tiles and cuBLAS).
bool matmul_type_supported(gguf::GgmlType t);

// The gate's activation of a gated FFN: SiLU (SwiGLU), or GELU as llama.cpp's CPU backend rounds it (the tanh
// approximation looked up through a table of f16 results, cpu::gelu).
enum class Glu { kSilu, kGelu };

// An input's gated activation, applied by a product where it quantizes the input: x'[t][i] = act(x[t][i]) *
// mul[t * mul_stride + i] (glu()'s roundings; gelu()'s with mul null: act(x) alone). The feed-forward's down
// projection of its gate and up; gemma4's per-layer input projection of its gate and the layer's input.
struct InputGate {
  bool on = false;
  Glu act = Glu::kSilu;
  const float* mul = nullptr;
  int64_t mul_stride = 0;
};

// x [n_rows][cols] f32 -> y [n_rows][cols / 32] Q8_0 blocks (34 bytes each), exactly as cpu::Kernels::quantize_q8_0
// (of the gated x where gate is on).
struct QuantizeQ8Args {
  const float* x = nullptr;
  uint8_t* y = nullptr;
  int64_t n_rows = 0, cols = 0;  // cols % 32 == 0
  cudaStream_t stream = nullptr;
  InputGate gate;
};
void quantize_q8_0(const QuantizeQ8Args& a);

// y[t][r] = dot(W row r, x[t]) for t < n_tok, with the activations converted as cpu::matmul does (Q8_0 for Q4_0/Q8_0
// weights, f16 for F16, bf16 for BF16). Decode and small batches use a warp per row and a tile of 8 tokens per block
// column, so each weight row is read once per tile; Q4_0/Q8_0 batches of kMmaMinTokens or more run on the int8
// tensor cores (mmq.cu: 64 or 128 rows x 32 or 64 tokens per block, the same exact integer block dots; d_w * dot is
// rounded once before the activation scale, so results differ from the CPU by rounding and summation order only). Float weights for up to kDecodeMaxTok tokens take a block per row instead (the
// short, wide F32 router then fills the GPU), and F32 batches of kMmaMinTokens or more run on cuBLAS (f32 throughout;
// the plain kernel when a graph capture would have to create cuBLAS's handle). Only the f32 summation order differs.
constexpr int64_t kMmaMinTokens = 16;
struct MatmulArgs {
  model::Mat w;
  const float* x = nullptr;  // [n_tok][w.cols]
  int64_t n_tok = 0;
  float* y = nullptr;        // [n_tok][w.rows]; must not alias x
  uint8_t* scratch = nullptr;  // >= q8_scratch_bytes(w.type, w.cols, n_tok) bytes (unused for float types)
  cudaStream_t stream = nullptr;
  // Q4_0/Q8_0 weights: x already quantized by quantize_q8_0 ([n_tok][cols / 32] blocks), shared by several
  // products of the same input (q, k, v); scratch is then unused. Ignored for float weight types.
  const uint8_t* x_q8 = nullptr;
  bool use_mma = true;  // false: the warp-per-row kernel at any n_tok (tests compare the two)
  // dequant_prefill_type weights, n_tok >= kMmaMinTokens: >= dequant_work_bytes(w.cols, n_tok) bytes, where the
  // activations are rounded to f16 and the weights dequantized to f16 tiles for cuBLAS (f32 sums); null, or inside
  // a graph capture that would create cuBLAS's handle: the warp-per-row kernel with Q8_0 activations.
  uint8_t* dequant = nullptr;
};
void matmul(const MatmulArgs& a);

// The MoE router's logits for a few tokens of the residual stream with its RMSNorm inside: each block norms x
// itself (rms_norm_q8's arithmetic) and the first also writes the normed rows to xn and their Q8_0 blocks to xq (if
// set), bit for bit what rms_norm_q8 writes, for the experts that follow; this saves that launch. Float weights
// (F32, F16, BF16), n_tok <= kDecodeMaxTok, the rows within 48 KiB of shared memory.
struct NormedRouterArgs {
  model::Mat w;                  // [n_expert] x [cols]
  const float* x = nullptr;      // [n_tok][cols] the residual stream
  const float* norm = nullptr;   // [cols]
  float eps = 1e-5f;
  int64_t n_tok = 0;
  float* y = nullptr;            // [n_tok][n_expert] logits
  float* xn = nullptr;           // [n_tok][cols] out: the normed rows; must not alias x
  uint8_t* xq = nullptr;         // [n_tok][cols / 32] out: Q8_0 blocks of xn, or null
  cudaStream_t stream = nullptr;
};
bool normed_router_supported(const model::Mat& w, int64_t n_tok);
void normed_router(const NormedRouterArgs& a);

// The routed experts of a layer in one launch: slot v = t * n_used + k multiplies expert ids[v] of a stacked expert
// tensor (w describes one expert; expert e starts at w.data + e * expert_stride) with input row t (x_per_slot false:
// x is [n_tok][cols], the gate and up matrices) or row v (x_per_slot true: x is [n_tok * n_used][cols], down).
// The ids are read on the GPU, so the router's output never visits the host.
struct MoeMatmulArgs {
  model::Mat w;                       // one expert: rows x cols
  uint64_t expert_stride = 0;   // bytes between experts (>= rows * row_bytes)
  int32_t n_expert = 0;         // ids outside [0, n_expert) are a bug (the router writes them)
  const int32_t* ids = nullptr; // [n_tok][n_used]
  int64_t n_tok = 0;
  int32_t n_used = 0;
  const float* x = nullptr;
  bool x_per_slot = false;
  float* y = nullptr;           // [n_tok * n_used][w.rows]
  uint8_t* scratch = nullptr;   // >= q8_scratch_bytes(w.type, w.cols, x_per_slot ? n_tok * n_used : n_tok)
  cudaStream_t stream = nullptr;
};
void moe_matmul(const MoeMatmulArgs& a);

// Prefill's routed experts grouped by expert, so that each expert's weight rows are read once per tile of its
// tokens instead of once per (token, slot). moe_plan sorts the slots by expert on the device (ids never visit the
// host) and cuts each expert's slots into tiles; moe_matmul_grouped then gathers the input rows in that order and
// multiplies tile by tile, writing each result to its slot's row. Results equal moe_matmul's bit for bit (each
// slot's dot products run the same operations in the same order).
// With quantized weights, tiles of more than 8 slots (moe_tile_slots) run on the int8 tensor cores instead (mmq.cu):
// the input rows are quantized once (per token for gate/up, or taken from x_q8) and read by index, no f32 gather;
// results then equal moe_matmul's up to the f32 summation order (and for the per-16 scaled K-quants the rounding of
// each block's halves).
// tiles layout: tiles[0] = the number of tiles, then per tile (expert, first index into order, slot count <=
// tile_slots).
// Streamed experts plan one group of the experts a GPU tier holds at a time: ids are then indices into the group
// (-1 for (token, slot) pairs of other groups, which are left out), and each tile names the group member's slot
// (slot_of[index]). The order is padded to n_slots with index 0, so kernels that gather n_slots rows stay in bounds.
struct MoePlanArgs {
  const int32_t* ids = nullptr;  // [n_slots] expert per (token, slot) pair (the router's output), or group index
  int64_t n_slots = 0;
  int32_t n_expert = 0;          // <= 1024: experts, or the group's members
  int32_t* order = nullptr;      // [n_slots] out: pairs grouped by expert
  int32_t* tiles = nullptr;      // [1 + 3 * moe_max_tiles(n_slots, n_expert, tile_slots)] out
  cudaStream_t stream = nullptr;
  int32_t tile_slots = 8;        // 1 .. 64; at least 8 needs no more tiles than the default
  const int32_t* slot_of = nullptr;  // [n_expert]: a group's slots; nullptr: ids are experts, all present
};
void moe_plan(const MoePlanArgs& a);

struct MoeGroupedMatmulArgs {
  model::Mat w;                        // one expert, as MoeMatmulArgs
  uint64_t expert_stride = 0;
  int32_t n_expert = 0;
  const int32_t* order = nullptr;  // from moe_plan
  const int32_t* tiles = nullptr;  // from moe_plan
  int64_t n_slots = 0;           // n_tok * n_used
  int32_t n_used = 0;
  const float* x = nullptr;      // as MoeMatmulArgs
  bool x_per_slot = false;
  float* gathered = nullptr;     // [n_slots][w.cols] work buffer (the warp-per-row kernel only)
  float* y = nullptr;            // [n_slots][w.rows]
  uint8_t* scratch = nullptr;    // >= q8_scratch_bytes(w.type, w.cols, n_slots)
  cudaStream_t stream = nullptr;
  int32_t tile_slots = 8;        // the plan's; > 8 needs Q4_0/Q8_0 weights (the tensor-core path) or, up to 32, the
                                 // other q8_activation_types (the warp-per-row kernel over gathered inputs)
  // Tensor-core path: x already quantized by quantize_q8_0 ([n_tok or n_slots][cols / 32] blocks, as x), shared by
  // the gate and up products; x and scratch are then unused. Ignored by the warp-per-row kernel.
  const uint8_t* x_q8 = nullptr;
};
void moe_matmul_grouped(const MoeGroupedMatmulArgs& a);

// y = x / sqrt(mean(x^2) + eps) * weight per row (cpu::rms_norm; square sum in double). In place allowed (y == x).
// With a scale s != 1, ((x * r) * s) * weight, each product rounded (gemma4's router input); weight null: no product.
// With add_to, the normed rows are added into add_to instead ([n_rows][cols]: gemma4's post-norms ahead of the
// residual add, y unused), the sums then times *then_scale where set (a layer's output scale).
struct RmsNormArgs {
  const float* x = nullptr;       // [n_rows][cols]
  const float* weight = nullptr;  // [cols] or null
  float* y = nullptr;             // [n_rows][cols]
  int64_t n_rows = 0, cols = 0;
  float eps = 1e-5f;
  cudaStream_t stream = nullptr;
  float scale = 1.0f;
  float* add_to = nullptr;
  const float* then_scale = nullptr;
};
void rms_norm(const RmsNormArgs& a);

// gemma4's end of a MoE block, the arithmetic of three rms_norm launches in one for rows of up to 4,096 columns:
// x = (x + norm(norm(a) wa + norm(b) wb) w) * then_scale, every square sum in rms_norm's order. Longer rows take the
// three launches, which leave a normed and summed in place.
struct PostNormsArgs {
  float* a = nullptr;         // [n_rows][cols]: the routed experts' sum
  const float* wa = nullptr;  // [cols]: its norm
  const float* b = nullptr;   // [n_rows][cols]: the dense MLP's output
  const float* wb = nullptr;  // [cols]: its norm
  const float* w = nullptr;   // [cols]: the block's norm ahead of the residual add
  float* x = nullptr;         // [n_rows][cols]: the residual stream
  const float* then_scale = nullptr;  // [1] or null: the layer's output scale
  int64_t n_rows = 0, cols = 0;
  float eps = 1e-6f;
  cudaStream_t stream = nullptr;
};
void moe_post_norms(const PostNormsArgs& a);

// cos and sin of every (position, pair) for positions [0, n_pos), computed on the host exactly as cpu::rope_angles
// does (angle advanced by repeated multiplication, divided by freq_factors[i] where given): [n_pos][n_rot / 2] pairs
// of (cos, sin).
std::vector<float> rope_table(int64_t n_pos, int n_rot, float base, const float* freq_factors = nullptr);

// Rotates the first n_rot dimensions of every head of x [n_tok][n_heads][head_dim] in place; token t is at position
// pos[t] (device), which must lie in the table.
struct RopeArgs {
  float* x = nullptr;
  int64_t n_tok = 0;
  int n_heads = 0, head_dim = 0, n_rot = 0;
  const int32_t* pos = nullptr;   // [n_tok]
  const float* table = nullptr;   // rope_table(n_pos, n_rot, base) on the device
  int64_t n_pos = 0;
  model::RopeStyle style = model::RopeStyle::kNormal;
  cudaStream_t stream = nullptr;
};
void rope(const RopeArgs& a);

// Writes the keys and values of n_tok tokens, rounded to f16, at positions pos[t] of one layer's cache.
struct StoreKvArgs {
  const float* k = nullptr;  // [n_tok][dim_k]
  const float* v = nullptr;  // [n_tok][dim_v]
  uint16_t* k_cache = nullptr;  // [n_ctx][dim_k] f16
  uint16_t* v_cache = nullptr;  // [n_ctx][dim_v] f16
  const int32_t* pos = nullptr;  // [n_tok], each < n_ctx
  int64_t n_tok = 0, dim_k = 0, dim_v = 0, n_ctx = 0;
  cudaStream_t stream = nullptr;
};
void store_kv(const StoreKvArgs& a);

// Causal attention with GQA over one layer's f16 cache (cpu::attention's operation): token t sees positions
// 0 .. pos[t]; q is rounded to f16, scores are f32. Unlike the CPU code, which rounds its value accumulator to f16 after
// every position as ggml does, the softmax and the value sums run in f32 (tensor cores for batches: f16
// probabilities, f32 sums); tests/gpu/attention_test.cpp states the tolerances. Decode and small batches split the
// positions over the SMs when `work` is given (flash decoding) and merge the parts in a second kernel; larger
// batches take a tiled tensor-core kernel (head dims 64, 128, 256). The launch depends on n_ctx, never on the
// positions in use, so a captured decode step replays correctly at any position.
struct AttentionArgs {
  const float* q = nullptr;        // [n_tok][n_head * head_dim_k], 16-byte aligned
  const uint16_t* k = nullptr;     // [n_ctx][n_head_kv * head_dim_k] f16, 16-byte aligned
  const uint16_t* v = nullptr;     // [n_ctx][n_head_kv * head_dim_v] f16, 16-byte aligned
  float* out = nullptr;            // [n_tok][n_head * head_dim_v]
  const int32_t* pos = nullptr;    // [n_tok], each in [0, n_ctx)
  int n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0;  // head dims <= 512, multiples of 8
  int64_t n_tok = 0;
  float scale = 1.0f;
  cudaStream_t stream = nullptr;
  int64_t n_ctx = 0;      // cache positions; sizes the split (required with work)
  float* work = nullptr;  // >= attention_work_bytes(n_tok, n_head, head_dim_v, n_ctx); nullptr: no split (slow decode)
  // > 0: token t sees only positions pos[t] - window + 1 .. pos[t] (a sliding-window layer; the split kernel).
  int64_t window = 0;
  // Where given (head_dim_v a multiple of 32): out's Q8_0 blocks too, [n_tok][n_head * head_dim_v / 32] as
  // quantize_q8_0 writes them, for the output projection (the merge writes them beside out, no extra launch).
  uint8_t* out_q8 = nullptr;
};
void attention(const AttentionArgs& a);

// y[i] = act(gate[i]) * up[i] (y may be gate), as cpu::swiglu / cpu::geglu.
struct GluArgs {
  const float* gate = nullptr;
  const float* up = nullptr;
  float* y = nullptr;
  int64_t n = 0;
  cudaStream_t stream = nullptr;
  Glu act = Glu::kSilu;
};
void glu(const GluArgs& a);

// y[t][i] = gelu(x[t][i]) * (m ? m[t * m_stride + i] : 1) for t < n_rows, i < cols (cpu::gelu, then the product):
// gemma4's per-layer input gate, whose multiplier is one layer's slice of the per-layer inputs. y may be x.
struct GeluArgs {
  const float* x = nullptr;     // [n_rows][cols]
  const float* m = nullptr;     // row t at m + t * m_stride, or null
  int64_t m_stride = 0;
  float* y = nullptr;           // [n_rows][cols]
  int64_t n_rows = 0, cols = 0;
  cudaStream_t stream = nullptr;
};
void gelu(const GeluArgs& a);

// x[i] *= s.
struct ScaleArgs {
  float* x = nullptr;
  int64_t n = 0;
  float s = 1.0f;
  cudaStream_t stream = nullptr;
};
void scale(const ScaleArgs& a);

// x[i] = tanh(x[i] * (1 / cap)) * cap: the logits' soft cap.
struct SoftcapArgs {
  float* x = nullptr;
  int64_t n = 0;
  float cap = 0.0f;  // > 0
  cudaStream_t stream = nullptr;
};
void softcap(const SoftcapArgs& a);

// x[i] += y[i]: the residual connection.
struct AddArgs {
  float* x = nullptr;
  const float* y = nullptr;
  int64_t n = 0;
  cudaStream_t stream = nullptr;
};
void add(const AddArgs& a);

// Up to four copies of 4-byte words in one launch, each span's bytes from src to dst (either may be pinned host
// memory, which kernels address at its host address): a decode step's router choices and normed rows for the host,
// one kernel of a captured segment where a copy each would be a node each.
struct CopySpan {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t bytes = 0;  // a multiple of 4; 0: no copy
};
struct CopySpansArgs {
  CopySpan spans[4] = {};
  cudaStream_t stream = nullptr;
};
void copy_spans(const CopySpansArgs& a);

// Routing of each token (the CPU engine's moe_ffn): softmax over all n_expert router logits, the n_used largest
// (ties: the lower id first), weights renormalized over the selected when norm_topk (the Mixtral layout's softmax
// over the selected equals this).
struct RouteArgs {
  const float* logits = nullptr;  // [n_tok][n_expert]
  int64_t n_tok = 0;
  int n_expert = 0, n_used = 0;   // n_expert <= 1024, n_used <= 32
  bool norm_topk = true;
  int32_t* ids = nullptr;         // [n_tok][n_used] out
  float* weights = nullptr;       // [n_tok][n_used] out
  cudaStream_t stream = nullptr;
  // [n_expert] or null: each weight times its expert's output scale (gemma4's, folded into the weight: one rounding
  // where the CPU rounds the output times the scale, then times the weight).
  const float* expert_scale = nullptr;
};
void route(const RouteArgs& a);

// out[t] = sum over k in order of weights[t][k] * expert_out[t][k] (the CPU engine's combine order).
struct MoeCombineArgs {
  const float* expert_out = nullptr;  // [n_tok][n_used][n_embd]
  const float* weights = nullptr;     // [n_tok][n_used]
  float* out = nullptr;               // [n_tok][n_embd]
  int64_t n_tok = 0, n_embd = 0;
  int n_used = 0;
  cudaStream_t stream = nullptr;
  bool accumulate = false;  // out += the sum, rounded as add() would add it
};
void moe_combine(const MoeCombineArgs& a);

// out[i] = row ids[i] of the table, dequantized (cpu::get_row); with slot_of, row slot_of[ids[i]] of a row cache's
// slots (cache/cuda/device_rows.h), which must hold every id asked for.
struct GetRowsArgs {
  model::Mat table;
  const int32_t* ids = nullptr;  // [n] (device), each < table.rows (with slot_of: < n_ids)
  const int32_t* slot_of = nullptr;  // [n_ids] (device): the slot of each id, -1 absent; nullptr: ids are rows
  int64_t n_ids = 0;
  int64_t n = 0;
  float* out = nullptr;          // [n][table.cols]
  cudaStream_t stream = nullptr;
};
void get_rows(const GetRowsArgs& a);

// out[r] = the index of the largest of x[r][0 .. n) (the first on ties, as the CPU sampler's argmax).
struct ArgmaxArgs {
  const float* x = nullptr;  // [n_rows][n]
  int64_t n_rows = 0, n = 0;
  int32_t* out = nullptr;    // [n_rows]
  cudaStream_t stream = nullptr;
};
void argmax(const ArgmaxArgs& a);

// ---- Decode (a few tokens): fused kernels that read weight rows as aligned words, many rows' loads in flight per
// warp, and keep matmul's per-lane block order and warp reduction, so every result equals the unfused kernels' bit
// for bit.

// Up to this many input vectors per decode launch.
constexpr int64_t kDecodeMaxTok = 4;
// Weight rows per decode_matvec block: an f32 input is quantized by each of the ceil(rows / 8) blocks, so callers
// with wide inputs and many rows quantize once beforehand (quantize_q8_0) instead.
constexpr int64_t kDecodeRowsPerBlock = 8;

// Whether decode_matvec (and matmul's use of it) takes w for n_tok vectors: Q4_0/Q8_0 rows that start 16-byte aligned
// (data and row_bytes multiples of 16) and n_tok <= kDecodeMaxTok.
bool decode_matvec_supported(const model::Mat& w, int64_t n_tok);

// y_i[t][r] = residual_i[t][r] + dot(W_i row r, x[t]) for up to 3 matrices of the same input (q, k and v; gate and
// up) in one launch; residual_i may be null (no add) or equal y_i (the residual stream updated in place). matmul()
// routes small Q4_0/Q8_0 products here too.
struct DecodeMatvecPart {
  model::Mat w;
  float* y = nullptr;                // [n_tok][w.rows]
  const float* residual = nullptr;   // [n_tok][w.rows] or null
};
struct DecodeMatvecArgs {
  DecodeMatvecPart parts[3];
  int n_parts = 1;
  const float* x = nullptr;       // [n_tok][cols] f32: quantized to Q8_0 inside each block, or
  const uint8_t* x_q8 = nullptr;  // [n_tok][cols / 32] Q8_0 blocks (quantize_q8_0 / rms_norm_q8), preferred if set
  int64_t n_tok = 1;
  cudaStream_t stream = nullptr;
  // x's RMSNorm weight [cols], or null: each block norms x as rms_norm_q8 does (its Q8_0 blocks bit for bit) before
  // quantizing, which saves that launch; x_q8 is then null.
  const float* norm = nullptr;
  float eps = 1e-5f;
  // x's gated activation, applied as each block quantizes it (x_q8 and norm null), which saves that launch.
  InputGate gate;
};
void decode_matvec(const DecodeMatvecArgs& a);

// rms_norm followed by quantize_q8_0 of its output, in one launch: y (optional) and y_q8 equal the two unfused
// kernels' outputs bit for bit. y must not alias x.
struct RmsNormQ8Args {
  const float* x = nullptr;       // [n_rows][cols]
  const float* weight = nullptr;  // [cols]
  float* y = nullptr;             // [n_rows][cols] or null
  uint8_t* y_q8 = nullptr;        // [n_rows][cols / 32] Q8_0 blocks
  int64_t n_rows = 0, cols = 0;   // cols % 32 == 0
  float eps = 1e-5f;
  cudaStream_t stream = nullptr;
};
void rms_norm_q8(const RmsNormQ8Args& a);

// The attention inputs' per-head steps in one launch, as rms_norm (q_norm, k_norm per head; skipped when null), rope
// of q and k, and store_kv of k and v compute them; q and k are updated in place. v_norm: each value head is RMS-normed
// (no weight) before its store. k null: queries only (a layer that reads another layer's cache; v and the caches
// unused).
struct QkNormRopeStoreArgs {
  float* q = nullptr;              // [n_tok][n_head * head_dim_k]
  float* k = nullptr;              // [n_tok][n_head_kv * head_dim_k]
  const float* v = nullptr;        // [n_tok][n_head_kv * head_dim_v]
  const float* q_norm = nullptr;   // [head_dim_k] or null
  const float* k_norm = nullptr;   // [head_dim_k] or null
  float eps = 1e-5f;
  int n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0, n_rot = 0;  // head dims <= 512
  int64_t n_tok = 0;
  const int32_t* pos = nullptr;    // [n_tok]
  const float* table = nullptr;    // rope_table(n_pos, n_rot, base)
  int64_t n_pos = 0;
  model::RopeStyle style = model::RopeStyle::kNormal;
  uint16_t* k_cache = nullptr;     // [n_ctx][n_head_kv * head_dim_k] f16
  uint16_t* v_cache = nullptr;     // [n_ctx][n_head_kv * head_dim_v] f16
  int64_t n_ctx = 0;
  cudaStream_t stream = nullptr;
  bool v_norm = false;
};
void qk_norm_rope_store(const QkNormRopeStoreArgs& a);

// Routed experts of a few tokens in two launches. moe_decode_gate_up: for slot v = t * n_used + k, act[v] =
// act(gate_e . x[t]) * up_e . x[t] with e = ids[v], quantized to Q8_0 in the epilogue (as moe_matmul, glu and
// quantize_q8_0 compute them). moe_decode_down: out[t] = x[t] + sum over k in order of weights[t][k] *
// (down_e . act[t * n_used + k]) (moe_matmul, moe_combine and add). Experts are addressed as in MoeMatmulArgs (w
// describes expert 0; expert e at w.data + e * stride), so a pool of cached experts works through remapped ids.
bool moe_decode_supported(const model::Mat& gate, const model::Mat& up, const model::Mat& down, int64_t n_tok, int32_t n_used);
// Each launch on its own: a down projection whose rows the kernel cannot stage (a Q4_0 row of 704 columns, 396 bytes,
// as Gemma 4 26B-A4B's) follows moe_decode_gate_up with moe_matmul of its f32 act.
bool moe_decode_gate_up_supported(const model::Mat& gate, const model::Mat& up, int64_t n_tok, int32_t n_used);
bool moe_decode_down_supported(const model::Mat& down, int64_t n_tok, int32_t n_used);
struct MoeDecodeGateUpArgs {
  model::Mat gate, up;                     // one expert: [n_ff] x [n_embd]; n_ff % 32 == 0
  uint64_t gate_stride = 0, up_stride = 0;
  int32_t n_expert = 0;
  const int32_t* ids = nullptr;      // [n_tok][n_used]
  int64_t n_tok = 0;
  int32_t n_used = 0;
  const uint8_t* x_q8 = nullptr;     // [n_tok][n_embd / 32] Q8_0 blocks
  float* act = nullptr;              // [n_tok * n_used][n_ff] f32, or null
  uint8_t* act_q8 = nullptr;         // [n_tok * n_used][n_ff / 32] Q8_0 blocks
  cudaStream_t stream = nullptr;
  Glu glu = Glu::kSilu;
};
void moe_decode_gate_up(const MoeDecodeGateUpArgs& a);

struct MoeDecodeDownArgs {
  model::Mat down;                         // one expert: [n_embd] x [n_ff]
  uint64_t down_stride = 0;
  int32_t n_expert = 0;
  const int32_t* ids = nullptr;      // [n_tok][n_used]
  const float* weights = nullptr;    // [n_tok][n_used]
  int64_t n_tok = 0;
  int32_t n_used = 0;
  const uint8_t* act_q8 = nullptr;   // [n_tok * n_used][n_ff / 32] (moe_decode_gate_up)
  const float* x = nullptr;          // [n_tok][n_embd] residual, or null (out = the sum alone)
  float* out = nullptr;              // [n_tok][n_embd]; may equal x
  cudaStream_t stream = nullptr;
};
void moe_decode_down(const MoeDecodeDownArgs& a);

// ---- Hybrid models (qwen35moe): the Gated DeltaNet layers' steps (cpu/delta_net.h is the reference) and the gates
// of the attention layers and the shared expert.

// cpu::causal_conv1d followed by SiLU (swiglu's x / (1 + exp(-x))): a thread per channel runs the batch's tokens in
// order, each tap's product and sum rounded as the CPU rounds them; the window then holds the last kernel - 1 rows.
// save (or null): the window after the first save_after tokens (0 < save_after < n_tok), laid out as window.
struct CausalConvArgs {
  const float* x = nullptr;     // [n_tok][channels]
  int64_t n_tok = 0, channels = 0;
  const float* w = nullptr;     // [channels][kernel] (ssm_conv1d)
  int kernel = 0;               // 2 .. 16
  float* window = nullptr;      // [kernel - 1][channels], oldest row first
  float* y = nullptr;           // [n_tok][channels]; must not alias x or window
  float* save = nullptr;
  int64_t save_after = 0;
  cudaStream_t stream = nullptr;
};
void causal_conv1d_silu(const CausalConvArgs& a);

// cpu::l2_norm in place over the first n_heads heads of head_dim of each of n_tok rows (the q and k channels of the
// convolution's output): a warp per head, the square sum in double.
struct L2NormHeadsArgs {
  float* x = nullptr;  // row t at x + t * stride
  int64_t n_tok = 0, stride = 0;
  int n_heads = 0, head_dim = 0;
  float eps = 1e-6f;
  cudaStream_t stream = nullptr;
};
void l2_norm_heads(const L2NormHeadsArgs& a);

// cpu::gated_delta_rule with its gates computed inside (as the CPU forward computes them: beta = sigmoid(beta_in),
// g = softplus(alpha + dt_bias) * a_scale, each step rounded). Short runs go token by token: a warp per row j of a v
// head's state (the row output j reads, RecurrentState's layout), in registers over the batch's tokens in order; its
// dot products sum in another order than the CPU's, its updates are the same fused multiply-adds. Given work, runs
// of 16 tokens or more take the chunked form (delta_net.cu), whose sums differ from the recurrence's by f32 rounding.
struct GatedDeltaRuleArgs {
  const float* q = nullptr;        // token t's q head j at q + t * stride + j * head_dim (L2-normalized)
  const float* k = nullptr;        // likewise
  const float* v = nullptr;        // token t's v head h at v + t * stride + h * head_dim
  int64_t stride = 0;
  const float* alpha = nullptr;    // [n_tok][n_v_heads] ssm_alpha's products
  const float* beta = nullptr;     // [n_tok][n_v_heads] ssm_beta's products
  const float* dt_bias = nullptr;  // [n_v_heads]
  const float* a_scale = nullptr;  // [n_v_heads] (ssm_a)
  float* state = nullptr;          // [n_v_heads][head_dim][head_dim], updated
  float* out = nullptr;            // [n_tok][n_v_heads][head_dim]
  int64_t n_tok = 0;
  int n_k_heads = 0, n_v_heads = 0, head_dim = 0;  // head_dim 64 or 128; v head h reads q/k head h % n_k_heads
  float* save = nullptr;           // or null: the state after the first save_after tokens (0 < save_after < n_tok)
  int64_t save_after = 0;
  float* work = nullptr;           // gated_delta_rule_work_bytes(n_tok, n_v_heads), or null: token by token
  cudaStream_t stream = nullptr;
};
void gated_delta_rule(const GatedDeltaRuleArgs& a);

// The gated attention's query: attn_q's rows hold each head's query and then its gate ([n_tok][n_head][2][head_dim]);
// the queries go to q [n_tok][n_head][head_dim] for qk_norm_rope_store.
struct SplitQueryArgs {
  const float* q_gate = nullptr;
  float* q = nullptr;
  int64_t n_tok = 0;
  int n_head = 0, head_dim = 0;
  cudaStream_t stream = nullptr;
};
void split_query(const SplitQueryArgs& a);

// x[t][h][d] *= sigmoid(gate) with the gate from q_gate [n_tok][n_head][2][head_dim] (its second halves): the
// attention output's gate, as the CPU computes it (1 / (1 + exp(-g)), one rounding per step).
struct SigmoidGateArgs {
  float* x = nullptr;             // [n_tok][n_head][head_dim]
  const float* q_gate = nullptr;
  int64_t n_tok = 0;
  int n_head = 0, head_dim = 0;
  cudaStream_t stream = nullptr;
};
void sigmoid_gate(const SigmoidGateArgs& a);

// x[t][i] += y[t][i] * sigmoid(logit[t]): the shared expert's output under its gate, added to the residual stream.
struct AddSigmoidScaledArgs {
  float* x = nullptr;            // [n_tok][n]
  const float* y = nullptr;      // [n_tok][n]
  const float* logit = nullptr;  // [n_tok]
  int64_t n_tok = 0, n = 0;
  cudaStream_t stream = nullptr;
};
void add_sigmoid_scaled(const AddSigmoidScaledArgs& a);

}  // namespace df::cuda
