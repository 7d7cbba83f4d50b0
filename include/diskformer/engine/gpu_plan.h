// The GPU residency plan: what stays in GPU memory for the whole run and how many expert records the GPU slot pool
// holds, from the model's shape and a GPU memory budget. Host-only arithmetic; the CUDA engine allocates by it.
//
//   resident = CUDA context reserve + token embeddings (all resident, or tied to the head) + output head + every layer's attention, norms and router
//              (+ dense FFNs of dense models) + KV cache + session work buffers + a margin
//   pool     = slots x record, one (layer, expert) record = gate + up + down rows of one expert
//   slots    = (budget - resident) / record, capped at n_layer x n_expert (then every expert is resident)
//
// The budget is GPU memory as nvidia-smi counts it for the process, so the CUDA context is part of it. A budget that
// cannot hold the resident part plus two tokens' experts of one layer (2 x n_expert_used slots) is refused with the
// itemized numbers. Dense models do not stream on the GPU: the budget must hold the whole model.
//
// Sizes assume the engine packs resident weights into few large allocations (pieces 256-byte aligned) and the pool
// into one: a cudaMalloc per tensor may round each large tensor up to the driver's 2 MiB pages, which the margin
// does not cover.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "diskformer/engine/plan.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/util/result.h"

namespace df::engine {

// The CUDA context and cuBLAS workspace of one process on an H200 with CUDA 12 measure a little under this; the CUDA
// engine passes what it measured (device memory in use right after initialization) instead.
constexpr uint64_t kGpuContextBytes = 512ull << 20;
// Slack for the driver rounding the ~30 session buffers to its pages, and the streaming engine's small tables (slot
// map, per-layer miss lists).
constexpr uint64_t kGpuMarginBytes = 32ull << 20;

struct GpuPlanOptions {
  std::optional<uint64_t> budget;           // bytes of GPU memory, context included; nullopt = everything resident
  uint32_t n_ctx = 4096;                    // KV cache positions
  uint32_t max_batch = 512;                 // tokens per forward pass (GpuSessionOptions::max_batch)
  uint64_t context_bytes = kGpuContextBytes;
};

// The resident part, itemized. Weight items are tensor bytes as the GPU stores them (rows x row_bytes), each rounded
// up to 256 bytes.
struct GpuResident {
  uint64_t context = 0;     // CUDA context + cuBLAS workspace (GpuPlanOptions::context_bytes)
  uint64_t token_embd = 0;  // [n_vocab] x [n_embd]
  uint64_t output = 0;      // output head [n_vocab] x [n_embd]; 0 when tied to token_embd
  uint64_t attention = 0;   // wq, wk, wv, wo of every layer
  uint64_t norms = 0;       // attn, ffn, q and k norms of every layer, and output_norm (f32)
  uint64_t routers = 0;     // ffn_gate_inp of every MoE layer ([n_expert] x [n_embd])
  uint64_t dense_ffn = 0;   // ffn_gate, ffn_up, ffn_down of dense layers (MoE models: 0; no family read has shared
                            // experts yet)
  uint64_t kv_cache = 0;    // f16 [n_layer][n_ctx][kv_dim_k + kv_dim_v]
  uint64_t work = 0;        // GpuSession::allocate()'s buffers at max_batch (grouped-expert buffers included)
  uint64_t margin = 0;      // kGpuMarginBytes

  uint64_t weights() const { return token_embd + output + attention + norms + routers + dense_ffn; }
  uint64_t total() const { return context + weights() + kv_cache + work + margin; }
};

struct GpuPlan {
  Residency mode = Residency::kAllResident;  // kAllResident or kStreamExperts
  std::optional<uint64_t> budget;
  uint32_t n_ctx = 0, max_batch = 0;
  GpuResident resident;
  uint64_t record_bytes = 0;  // one expert's gate + up + down (the largest over layers); 0 for dense models
  uint32_t n_records = 0;     // n_layer x n_expert: the records a fully resident model holds
  uint32_t min_slots = 0;     // 2 x n_expert_used: the fewest slots a budget must hold
  uint32_t slots = 0;         // records the pool holds; n_records when mode is kAllResident
  // Streaming with an untied output head: the token embeddings stay in pinned host RAM (a token's row is read from
  // there; resident.token_embd is 0). A tied head reads every row every token, so they stay on the GPU.
  bool token_embd_on_host = false;

  uint64_t pool_bytes() const { return uint64_t(slots) * record_bytes; }
  uint64_t total_bytes() const { return resident.total() + pool_bytes(); }
  double resident_fraction() const { return n_records ? double(slots) / n_records : 1.0; }  // of all experts
  std::string describe() const;  // one line for logs
  nlohmann::json to_json() const;
};

Result<GpuPlan> plan_gpu(const model::ModelSpec& spec, const model::ModelTensors& tensors,
                         const GpuPlanOptions& options);

// Bytes GpuSession::allocate() takes for n_ctx positions and batches of max_batch with grouped experts: KV cache,
// RoPE table and work buffers, unrounded: GpuSession::device_bytes() of such a session. A GPU test
// (tests/gpu/gpu_plan_test.cpp) holds it an upper bound within a few MiB, so a change of either side shows.
uint64_t gpu_session_bytes(const model::ModelSpec& spec, uint32_t n_ctx, uint32_t max_batch);
uint64_t gpu_kv_bytes(const model::ModelSpec& spec, uint32_t n_ctx);

}  // namespace df::engine
