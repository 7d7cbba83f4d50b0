// The GPU residency plan: what stays in GPU memory for the whole run and how many expert records the GPU tier
// holds, from the model's shape and a GPU memory budget. Host-only arithmetic over the session's buffer table
// (buffers.h) and the tier's slot layout (cache/planes.h): the engine allocates by the same two.
//
//   resident = CUDA context reserve + token embeddings (or none: rows read from pinned host RAM) + output head
//              + a per-layer embedding table (or a GPU row cache of its rows under a budget)
//              + every layer's attention (a hybrid's DeltaNet layers), norms and router (+ dense FFNs of dense
//              models, a hybrid's shared experts) + each session's KV cache, recurrent state, RoPE tables and
//              logits + the work buffers the sessions share + a margin
//   pool     = slots x record, one (layer, expert) record = gate + up + down rows of one expert (the largest
//              layer's); all resident: the experts as the file stacks them
//   slots    = (budget - resident) / record, capped at n_layer x n_expert (then every expert is resident)
//
// The budget is GPU memory as nvidia-smi counts it for the process, so the CUDA context is part of it. A budget that
// cannot hold the resident part plus two tokens' experts of one layer (2 x n_expert_used slots) is refused with the
// itemized numbers. Dense models do not stream on the GPU: the budget must hold the whole model.
//
// Sizes assume resident weights packed into few large allocations (pieces 256-byte aligned) and the pool into one: a
// cudaMalloc per tensor may round each large tensor up to the driver's 2 MiB pages, which the margin does not cover.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "diskformer/backend/cuda/buffers.h"
#include "diskformer/cache/planes.h"
#include "diskformer/model/records.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/util/result.h"

namespace df::cuda {

// The CUDA context and cuBLAS workspace of one process on an H200 with CUDA 12 measure a little under this; the
// engine passes what it measured (device memory in use right after initialization) instead.
constexpr uint64_t kGpuContextBytes = 512ull << 20;
// Slack for the driver rounding the session's buffers to its pages, and the streaming engine's small tables.
constexpr uint64_t kGpuMarginBytes = 32ull << 20;
// A mixture of experts' per-layer embedding rows on the GPU where its table streams: its experts take the rest.
constexpr uint32_t kGpuRowSlots = 4096;

// Whether the CPU's products of every routed expert round as this backend's decode kernels do
// (cpu::rounds_as_cuda_decode: the same Q8_0 activations and per-block terms; the 256-element types through the
// CUDA decode order), so that experts computed on the CPU give what the GPU would within the sum's order.
bool cpu_experts_round_alike(const model::RecordLayouts& layouts);

struct GpuPlanOptions {
  std::optional<uint64_t> budget;  // bytes of GPU memory, context included; nullopt = everything resident
  uint32_t n_ctx = 4096;           // KV cache positions
  uint32_t max_batch = 512;        // tokens per forward pass
  uint32_t sessions = 1;           // sessions open at once (the server's --parallel), each with its own buffers
  uint64_t context_bytes = kGpuContextBytes;
  // The per-layer embedding table through a GPU row cache of this many rows (at least max_batch), whatever the
  // budget; nullopt: the table resident where the budget holds it, else a row cache of what a dense model's budget
  // leaves, or kGpuRowSlots rows for a mixture of experts.
  std::optional<uint32_t> row_slots;
};

// The resident part, itemized. Weight items are tensor bytes as the GPU stores them (rows x row_bytes), each rounded
// up to 256 bytes.
struct GpuResident {
  uint64_t context = 0;     // CUDA context + cuBLAS workspace (GpuPlanOptions::context_bytes)
  uint64_t token_embd = 0;  // [n_vocab] x [n_embd]
  uint64_t output = 0;      // output head [n_vocab] x [n_embd]; 0 when tied to token_embd
  uint64_t attention = 0;   // wq, wk, wv, wo of every layer; a DeltaNet layer's projections (ssm_*)
  uint64_t norms = 0;       // attn, ffn, q and k norms of every layer, and output_norm (f32); a DeltaNet layer's
                            // convolution, gate biases and norm
  uint64_t routers = 0;     // ffn_gate_inp of every MoE layer ([n_expert] x [n_embd]), a shared expert's gate
  uint64_t dense_ffn = 0;   // ffn_gate, ffn_up, ffn_down of dense layers; a hybrid's shared experts (gemma4: every
                            // layer's, and the per-layer input gate, projections and the model's per-layer projection)
  uint64_t ple_table = 0;   // gemma4's per-layer embedding table [n_vocab] x [n_layer * n_embd_per_layer], or its
                            // GPU row cache: ple_row_slots rows + the id map [n_vocab] int32
  uint64_t kv_cache = 0;    // f16, per layer with a cache of its own [n_ctx][kv_dim_k + kv_dim_v], for each session
  uint64_t recurrent = 0;   // a hybrid's DeltaNet state and its copy inside a batch (buffers.h), for each session
  uint64_t work = 0;        // the work buffers at max_batch that the sessions share, and each one's RoPE tables and
                            // logits (buffers.h)
  uint64_t margin = 0;      // kGpuMarginBytes

  uint64_t weights() const { return token_embd + output + attention + norms + routers + dense_ffn + ple_table; }
  uint64_t total() const { return context + weights() + kv_cache + recurrent + work + margin; }
};

struct GpuPlan {
  bool stream_experts = false;  // routed experts through the GPU tier (else every weight resident)
  std::optional<uint64_t> budget;
  uint32_t n_ctx = 0, max_batch = 0;
  GpuResident resident;
  uint64_t record_bytes = 0;  // one GPU slot: gate + up + down planes (the largest over layers); 0 for dense models
  uint32_t n_records = 0;     // n_layer x n_expert: the records a fully resident model holds
  uint32_t min_slots = 0;     // 2 x n_expert_used: the fewest slots a budget must hold
  uint32_t slots = 0;         // records the pool holds; n_records when nothing streams
  // Every expert as the file stacks them (each tensor rounded up to 256 bytes): what an all-resident run uploads,
  // less than n_records slots where layers' records differ in size (some layers' down projections in Q6_K).
  uint64_t experts_bytes = 0;
  // Streaming with an untied output head: the token embeddings stay in pinned host RAM (a token's row is read from
  // there; resident.token_embd is 0). A tied head reads every row every token, so they stay on the GPU.
  bool token_embd_on_host = false;
  // A budget below the all-resident plan: gemma4's per-layer embedding table stays on disk and its rows go through a
  // GPU row cache of this many rows (cache/cuda/device_rows.h; resident.ple_table counts its slots and id map).
  // 0: the table resident.
  uint32_t ple_row_slots = 0;

  uint64_t pool_bytes() const { return stream_experts ? uint64_t(slots) * record_bytes : experts_bytes; }
  uint64_t total_bytes() const { return resident.total() + pool_bytes(); }
  double resident_fraction() const { return n_records ? double(slots) / n_records : 1.0; }  // of all experts
  std::string mode_name() const { return stream_experts ? "experts streamed" : "all resident"; }
  std::string describe() const;  // one line for logs
  nlohmann::json to_json() const;
};

// Where each part of an expert record lies in its RAM image (gate, up, down), per layer: the GPU tier's planes.
std::vector<std::vector<cache::PartPlace>> expert_planes(const model::RecordLayouts& layouts);

Result<GpuPlan> plan_gpu(const model::ModelSpec& spec, const model::ModelTensors& tensors,
                         const model::RecordLayouts& layouts, const GpuPlanOptions& options);

// The budget a run without --gpu-budget takes when its all-resident plan does not fit a device of device_bytes:
// the device less a headroom (5%, at least 256 MiB: a display, another process, allocator slack), where the model
// has something to stream (routed experts, a per-layer embedding table); nullopt where it fits as it is or has
// nothing to stream (then it is refused as larger than the device).
std::optional<uint64_t> automatic_budget(const GpuPlan& all_resident, uint64_t device_bytes, bool can_stream);

}  // namespace df::cuda
