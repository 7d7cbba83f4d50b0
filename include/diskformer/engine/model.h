// A model opened for inference on the CPU: header, spec, tensor bindings, weights in RAM or streamed under a
// budget, the thread pool, and sessions that each hold a KV cache.
//
//   DF_ASSIGN(auto model, engine::Model::open("m.gguf", {.threads = 4}));
//   engine::Session s(*model);
//   DF_TRY(s.eval(prompt_ids));            // logits of the last token in s.logits()
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cpu/thread_pool.h"
#include "diskformer/engine/disk_weights.h"
#include "diskformer/engine/plan.h"
#include "diskformer/gguf/reader.h"
#include "diskformer/model/forward.h"
#include "diskformer/model/kv_cache.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"

namespace df::engine {

struct ModelOptions {
  uint32_t n_ctx = 0;                     // 0: the model's training context, capped at 4096
  int threads = 0;                        // 0: physical cores
  std::optional<uint64_t> ram_budget;     // nullopt: everything resident
  const cpu::Kernels* kernels = nullptr;  // nullptr: the best this CPU runs
  // RAM of the weights (the resident arena and the slot pool); nullptr: posix_memalign. A GPU run passes pinned
  // memory, so that experts copied from RAM to the GPU move as DMA at the link's speed.
  io::HostAllocator* host_allocator = nullptr;
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> open(const std::string& path, const ModelOptions& options = {});

  const gguf::File& file() const { return file_; }
  const model::ModelSpec& spec() const { return spec_; }
  const model::ModelTensors& tensors() const { return tensors_; }
  DiskWeights& weights() { return *weights_; }
  cpu::Context& context() { return ctx_; }
  uint32_t n_ctx() const { return n_ctx_; }
  int threads() const { return pool_->size(); }

 private:
  Model() = default;
  gguf::File file_;
  model::ModelSpec spec_;
  model::ModelTensors tensors_;
  uint32_t n_ctx_ = 0;
  std::unique_ptr<cpu::ThreadPool> pool_;
  cpu::Context ctx_;
  std::unique_ptr<DiskWeights> weights_;
};

// One sequence: its KV cache and the forward pass over it. Positions are appended by eval(); truncate() drops the
// tail so that a shared prefix is reused (the KV entries of kept positions are unchanged).
class Session {
 public:
  explicit Session(Model& model);

  // Runs tokens after the n_past() positions already cached, in batches of at most n_batch tokens.
  Status eval(std::span<const int32_t> tokens, uint32_t n_batch = 512);
  // Logits of the last evaluated token, [n_vocab].
  std::span<const float> logits() const;
  uint32_t n_past() const { return kv_.n_past; }
  uint32_t n_ctx() const { return kv_.n_ctx; }
  void truncate(uint32_t n_keep);
  const model::ForwardStats& stats() const { return forward_.stats(); }
  void set_routing_stats(model::RoutingStats* r) { forward_.set_routing_stats(r); }

 private:
  Model& model_;
  model::KvCache kv_;
  model::Forward forward_;
};

}  // namespace df::engine
