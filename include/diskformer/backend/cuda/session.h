// Sequences on the GPU. A GpuModel is what every session of a model reads -- its spec, its resident weights, and
// where the routed experts stream, the GPU tier over the RAM tier -- and the one compute stream they run on (the
// GPU tier's consumer). A GpuSession is one sequence: its KV cache (f16, [n_layer][n_ctx][kv_dim]), the buffers of
// buffers.h, the captured decode step, and the forward pass (forward.h) over them. A hybrid model's session
// (qwen35moe) also holds its DeltaNet layers' recurrent state on the device and copies of it at a few positions in
// pinned RAM (model/state_copies.h), so that truncate() goes back to the nearest copy and the next eval recomputes
// the positions after it, as the CPU's hybrid sequence does.
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
#include "diskformer/cache/cuda/device_rows.h"
#include "diskformer/cache/cuda/device_tier.h"
#include "diskformer/cache/tier.h"
#include "diskformer/cudart/buffer.h"
#include "diskformer/cudart/graphs.h"
#include "diskformer/io/buffer.h"
#include "diskformer/model/records.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/state_copies.h"
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

// Where the host's time in the streamed experts' layers went, seconds summed over the layers so far: all of it, the
// part blocked at the router's round trip (the GPU finishing the layer's attention and router, and the copies and
// products queued before them), and the part computing the CPU's share (while the GPU copies and multiplies the rest;
// where RAM holds every record, the GPU's pins, copies and launches are queued inside it, on the calling thread).
// What is left is planning: the schedule, the slots' pins (which wait where earlier copies still hold the staging
// buffers), the copies and launches queued outside the CPU's share.
struct ExpertHostTimes {
  double total_s = 0, gpu_wait_s = 0, cpu_s = 0;
};

struct GpuModel {
  model::ModelSpec spec;
  const GpuWeights* weights = nullptr;
  std::optional<StreamedExperts> streamed;  // nullopt: every expert resident in weights
  // The per-layer embedding table's rows where they stream (weights holds no table then); each batch's rows are
  // made present before its forward pass.
  cache::DeviceRowCache* ple_rows = nullptr;
  cudaStream_t stream = nullptr;            // every session's compute stream
};

// The work buffers (buffers.h's session_own complement) that the sessions of one model share: allocated by the first
// session made with them, at its shape; later sessions of that shape borrow them.
struct SessionWork {
  std::vector<DeviceBuffer> buf;  // by Buf; empty until the first session
};

struct GpuSessionOptions {
  uint32_t n_ctx = 4096;      // KV cache positions
  uint32_t max_batch = 512;   // tokens per forward pass; longer evals are split
  // Replay single-token steps from captured CUDA graphs: the whole step where every expert is resident, else the
  // work between the layers' round trips.
  bool decode_graph = true;
  // Batches of several tokens multiply the routed experts grouped by expert (moe_matmul_grouped: each expert's
  // weights read once per tile of its tokens) instead of once per (token, slot).
  bool grouped_experts = true;
  std::shared_ptr<SessionWork> work;  // nullptr: the session's own work buffers
};

class Forward;
class HybridForward;

class GpuSession {
 public:
  // Errors: not enough GPU memory for the buffers (naming the buffer and the sizes).
  static Result<std::unique_ptr<GpuSession>> create(const GpuModel& model, const GpuSessionOptions& options = {});
  ~GpuSession();
  GpuSession(const GpuSession&) = delete;
  GpuSession& operator=(const GpuSession&) = delete;

  // Runs tokens after the n_past() cached positions (in batches of max_batch). all_logits keeps the logits of every
  // token of this call ([n][n_vocab] in logits()), otherwise only the last token's. Errors: context overflow, a
  // token outside the vocabulary (nothing is run then), a failed read of a streamed expert or row (the batch is not
  // kept).
  Status eval(std::span<const int32_t> tokens, bool all_logits = false);
  // One decode step of several sessions of one model: tokens[i] after sessions[i]'s positions, in one forward pass
  // over sessions[0]'s buffers whose attention reads each token's own session's KV cache, so that each weight and
  // each routed expert the step needs is read (under a budget: copied to the GPU) once for all of them; each session's
  // logits are then its own row, as after an eval of its token. For the families whose forward is Forward's
  // (batch_supported); sessions distinct, at most max_batch. Errors: as eval's (nothing is run), or a failed read of
  // a streamed expert (no session advances).
  static bool batch_supported(const model::ModelSpec& spec);
  static Status decode_many(std::span<GpuSession* const> sessions, std::span<const int32_t> tokens);
  // The logits of the last eval, copied from the device on first use.
  std::span<const float> logits();
  // Greedy choice for the last evaluated token, computed on the device (the first maximum, as the CPU sampler).
  int32_t argmax();
  // The last evaluated token's logits on the device, [n_vocab], until the next eval; work queued on stream() after
  // the eval reads them in order (token selection: device_sampler.h).
  const float* last_logits_device() const;
  cudaStream_t stream() const { return model_.stream; }

  uint32_t n_past() const { return hybrid_ ? uint32_t(tokens_.size()) : n_past_; }
  uint32_t n_ctx() const { return opt_.n_ctx; }
  // GPU memory this session holds: KV cache, RoPE table, logits and its own work buffers (not the shared ones, nor
  // the weights: the model's).
  uint64_t device_bytes() const;
  // Streamed experts the CPU computed instead of the GPU.
  uint64_t cpu_experts_computed() const;
  // The host's time in the streamed experts' layers (zero where every expert is resident).
  ExpertHostTimes expert_host_times() const;
  // Forgets positions from n_keep on (their cache entries are overwritten by the next eval). A hybrid model's state
  // goes back to its newest copy at or before n_keep; the next eval recomputes the kept positions after it.
  void truncate(uint32_t n_keep);

 private:
  // A copy of a hybrid model's recurrent state (Buf::rec_state's bytes) after n_past positions.
  struct HostState {
    io::AlignedBuffer bytes;  // pinned
    uint32_t n_past = 0;
  };

  GpuSession(const GpuModel& m, const GpuSessionOptions& o);
  // The logits buffer holds at least `rows` rows (a larger one drops the captured step, which wrote the old one).
  Status hold_logits_rows(uint64_t rows);
  // staging_'s m ids and m positions to Buf::tok / Buf::pos, the ids' per-layer embedding rows made present first.
  Status upload_batch(int64_t m);
  // Runs `batch` from position n_past_ on in batches of max_batch (every row's logits into logits_host_ where
  // all_logits); lead (0: none) is a position after which the state is copied to Buf::rec_save.
  Status run(std::span<const int32_t> batch, bool all_logits, uint32_t lead);
  Status eval_hybrid(std::span<const int32_t> tokens, bool all_logits);
  // Buf::rec_state (or rec_save) into a copy's storage, after `n_past` positions; kept as the newest copy.
  void keep_copy(Buf from, uint32_t n_past);
  // The state of the newest copy at or before pos, or the empty state; n_past_ becomes its position.
  void restore(uint32_t pos);

  const GpuModel& model_;
  GpuSessionOptions opt_;         // holds the shared work buffers alive
  std::vector<DeviceBuffer> buf_;  // by Buf: its own, and views of the shared ones
  std::unique_ptr<Forward> forward_;
  uint32_t n_past_ = 0;
  uint64_t logits_rows_cap_ = 1;   // rows the logits buffer holds
  std::vector<float> logits_host_;
  uint64_t logits_rows_ = 0;       // rows the last eval produced
  bool logits_fresh_ = false;      // logits_host_ holds them
  StreamGraphs step_graph_;          // the captured single-token step (decode_graph, every expert resident)
  std::vector<int32_t> staging_;     // host ids and positions of one batch
  uint64_t last_row_ = 0;            // the last evaluated token's row of the logits buffer
  // Hybrid models: n_past_ counts the positions the state has seen, tokens_ every kept position's token.
  bool hybrid_ = false;
  HybridForward* hybrid_forward_ = nullptr;  // forward_, where hybrid_
  std::vector<int32_t> tokens_;
  model::StateCopies<HostState> copies_;
  std::vector<io::AlignedBuffer> free_;      // pinned storage not yet a copy (kStateSnapshots + 1 in all)
};

}  // namespace df::cuda
