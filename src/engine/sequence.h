// A backend's side of a model and of its sequences, behind engine::Model and engine::Session: the CPU's
// (cpu_backend.cpp) and, in CUDA builds, the GPU's (cuda/cuda_backend.cpp).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "diskformer/engine/model.h"
#include "diskformer/engine/session.h"
#include "diskformer/model/weights.h"

namespace df::engine {

class Sequence {
 public:
  virtual ~Sequence() = default;
  virtual Status eval(std::span<const int32_t> tokens, bool all_logits) = 0;
  virtual std::span<const float> logits() = 0;
  virtual int32_t next_token(sampling::Sampler& sampler, std::span<const int32_t> history) = 0;
  virtual uint32_t n_past() const = 0;
  virtual uint32_t n_ctx() const = 0;
  virtual uint32_t n_vocab() const = 0;
  virtual void truncate(uint32_t n_keep) = 0;
  virtual SessionStats stats() = 0;
  virtual void set_routing_stats(model::RoutingStats*) {}
};

class BackendModel {
 public:
  virtual ~BackendModel() = default;
  virtual Result<std::unique_ptr<Sequence>> new_sequence() = 0;
  virtual std::string describe() const = 0;  // where the weights are, one line
  virtual uint64_t bytes_read_at_open() const = 0;
  virtual void add_stats(ModelStats& s) {}   // the backend's tiers
  // One decode step of several of its sequences (batch.h): tokens[i] appended to seqs[i], each sequence's logits
  // then its own row. The default steps them one after another; a backend with a multi-sequence forward overrides it.
  virtual Status decode_batch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens);
  virtual void reset_stats() {}
};

// The CPU: the resident arena read through `source`, the forward pass over it and the model's RAM tier.
Result<std::unique_ptr<BackendModel>> open_cpu_backend(Model& model, model::TensorSource& source);
// CUDA: the weights uploaded through `source`, experts streamed under the GPU budget (CUDA builds only).
Result<std::unique_ptr<BackendModel>> open_cuda_backend(Model& model, model::TensorSource& source);
// Before the RAM tiers are made: what a CUDA run of this model streams through the GPU, so that RAM holds it -- its
// experts (in the RAM tier), its per-layer embedding rows (in a row cache) -- and the host memory the RAM tier takes
// (pinned: copies to the GPU run as DMA).
struct CudaStreams {
  bool experts = false;
  bool rows = false;
  // Without --gpu-budget, a model larger than the device that has something to stream takes the budget
  // cuda::automatic_budget gives; the run uses it as if given.
  std::optional<uint64_t> automatic_budget;
};
Result<CudaStreams> cuda_streams(const ModelFiles& files, uint32_t n_ctx, uint32_t sessions, const GpuOptions& options);
io::HostAllocator* cuda_host_allocator();

}  // namespace df::engine
