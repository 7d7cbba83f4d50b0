// Sequences on the GPU. A GpuModel is what every session of a model reads -- its spec, its resident weights, and
// where the routed experts stream, the GPU tier over the RAM tier -- and the one compute stream they run on (the
// GPU tier's consumer). A GpuSession is one sequence: its KV cache (f16, [n_layer][n_ctx][kv_dim]), the buffers of
// buffers.h, the captured decode step, and the forward pass (forward.h) over them.
//
//   cuda::GpuSession::create(model, {.n_ctx = 4096}) -> eval(prompt) -> argmax() / last_logits_device()
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cuda/buffers.h"
#include "diskformer/backend/cuda/weights.h"
#include "diskformer/cache/cuda/device_tier.h"
#include "diskformer/cache/tier.h"
#include "diskformer/cudart/buffer.h"
#include "diskformer/model/records.h"
#include "diskformer/model/spec.h"
#include "diskformer/util/result.h"

namespace df::cuda {

// Routed experts that stream through a GPU tier.
struct StreamedExperts {
  cache::DeviceTier* gpu = nullptr;  // the GPU slots: gate, up and down planes
  cache::RecordTier* ram = nullptr;  // what the GPU tier copies from, and what the CPU share reads
  const model::RecordLayouts* layouts = nullptr;
  cpu::Context* cpu = nullptr;       // decode's CPU share of the missed experts; nullptr: off
  bool prefetch = false;             // decode copies the next layer's guessed experts ahead
};

struct GpuModel {
  model::ModelSpec spec;
  const GpuWeights* weights = nullptr;
  std::optional<StreamedExperts> streamed;  // nullopt: every expert resident in weights
  cudaStream_t stream = nullptr;            // every session's compute stream
};

struct GpuSessionOptions {
  uint32_t n_ctx = 4096;      // KV cache positions
  uint32_t max_batch = 512;   // tokens per forward pass; longer evals are split
  bool decode_graph = true;   // replay single-token steps from a captured CUDA graph (all experts resident)
  // Batches of several tokens multiply the routed experts grouped by expert (moe_matmul_grouped: each expert's
  // weights read once per tile of its tokens) instead of once per (token, slot).
  bool grouped_experts = true;
};

class Forward;

class GpuSession {
 public:
  // Errors: not enough GPU memory for the buffers (naming the buffer and the sizes).
  static Result<std::unique_ptr<GpuSession>> create(const GpuModel& model, const GpuSessionOptions& options = {});
  ~GpuSession();
  GpuSession(const GpuSession&) = delete;
  GpuSession& operator=(const GpuSession&) = delete;

  // Runs tokens after the n_past() cached positions (in batches of max_batch). all_logits keeps the logits of every
  // token of this call ([n][n_vocab] in logits()), otherwise only the last token's. Errors: context overflow, a
  // token outside the vocabulary (nothing is run then), a failed read of a streamed expert (the batch is not kept).
  Status eval(std::span<const int32_t> tokens, bool all_logits = false);
  // The logits of the last eval, copied from the device on first use.
  std::span<const float> logits();
  // Greedy choice for the last evaluated token, computed on the device (the first maximum, as the CPU sampler).
  int32_t argmax();
  // The last evaluated token's logits on the device, [n_vocab], until the next eval; work queued on stream() after
  // the eval reads them in order (token selection: device_sampler.h).
  const float* last_logits_device() const;
  cudaStream_t stream() const { return model_.stream; }

  uint32_t n_past() const { return n_past_; }
  uint32_t n_ctx() const { return opt_.n_ctx; }
  // GPU memory this session holds: KV cache, RoPE table and work buffers (the weights are the model's).
  uint64_t device_bytes() const;
  // Streamed experts the CPU computed instead of the GPU.
  uint64_t cpu_experts_computed() const;
  // Forgets positions from n_keep on (their cache entries are overwritten by the next eval).
  void truncate(uint32_t n_keep);

 private:
  GpuSession(const GpuModel& m, const GpuSessionOptions& o);
  void decode_step_graph();

  const GpuModel& model_;
  GpuSessionOptions opt_;
  std::vector<DeviceBuffer> buf_;  // by Buf
  std::unique_ptr<Forward> forward_;
  uint32_t n_past_ = 0;
  uint64_t logits_rows_cap_ = 1;   // rows the logits buffer holds
  std::vector<float> logits_host_;
  uint64_t logits_rows_ = 0;       // rows the last eval produced
  bool logits_fresh_ = false;      // logits_host_ holds them
  cudaGraphExec_t graph_ = nullptr;  // the captured single-token step (decode_graph)
  std::vector<int32_t> staging_;     // host ids and positions of one batch
};

}  // namespace df::cuda
