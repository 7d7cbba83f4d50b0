// The weights of a model read from disk through the disk tier (io/ reads, cache/ slot pool) into RAM, as a
// WeightSource for the forward pass. What the plan keeps resident is read once at open into one arena; streamed
// records (routed experts, or whole dense layers) go through a HostSlotPool under the budget.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "diskformer/cache/slot_pool.h"
#include "diskformer/engine/plan.h"
#include "diskformer/gguf/reader.h"
#include "diskformer/io/buffer.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"

namespace df::engine {

struct DiskStats {
  uint64_t resident_bytes_read = 0;  // read at open
  uint64_t streamed_bytes_read = 0;  // read into pool slots since open (or the last reset)
  cache::CacheStats cache;           // the pool's counters (zero when nothing streams)
  uint64_t bytes_from_disk() const { return resident_bytes_read + streamed_bytes_read; }
};

class DiskWeights final : public model::WeightSource {
 public:
  // spec, tensors and the File must outlive the weights; so must `allocator` (nullptr: posix_memalign), which
  // holds the arena and the slot pool.
  static Result<std::unique_ptr<DiskWeights>> open(const gguf::File& file, const model::ModelSpec& spec,
                                                   const model::ModelTensors& tensors, const WeightPlan& plan,
                                                   io::HostAllocator* allocator = nullptr);

  const model::Mat& token_embd() const override { return token_embd_; }
  const model::Mat& output_norm() const override { return output_norm_; }
  const model::Mat& output() const override { return output_; }
  Result<const model::LayerWeights*> layer(uint32_t il) override;
  Result<std::vector<model::ExpertWeights>> experts(uint32_t il, std::span<const int32_t> ids) override;
  uint32_t max_experts_per_call() const override;
  bool wants_expert_guesses() const override { return plan_.mode == Residency::kStreamExperts; }
  void prefetch_experts(uint32_t il, std::span<const int32_t> ids) override;
  const model::LayerWeights* resident_layer(uint32_t il) const override {
    return il < layers_.size() ? &layers_[il] : nullptr;
  }

  const WeightPlan& plan() const { return plan_; }
  DiskStats stats() const;
  void reset_stream_stats();

 private:
  DiskWeights(const gguf::File& f, const model::ModelSpec& s, const model::ModelTensors& t, const WeightPlan& p,
              io::HostAllocator& a)
      : file_(f), spec_(s), tensors_(t), plan_(p), allocator_(a) {}
  Status load_resident(const std::vector<const gguf::TensorInfo*>& list);
  Status create_pool();
  // Lays out the extents of one streamed record; the slot offsets keep each file offset's 4 KiB phase.
  Status locate(cache::Key key, std::vector<cache::Extent>& out) const;
  model::Mat resident(const gguf::TensorInfo* t) const;
  model::LayerWeights layer_views(const model::LayerTensors& l, const uint8_t* slot) const;

  const gguf::File& file_;
  const model::ModelSpec& spec_;
  const model::ModelTensors& tensors_;
  WeightPlan plan_;
  io::HostAllocator& allocator_;

  io::AlignedBuffer arena_;
  std::unordered_map<const gguf::TensorInfo*, uint64_t> arena_offset_;
  uint64_t resident_read_ = 0;
  model::Mat token_embd_, output_norm_, output_;
  std::vector<model::LayerWeights> layers_;  // resident layers (not in kStreamLayers mode)

  std::unique_ptr<cache::HostSlotPool> pool_;
  io::FileId pool_file_ = 0;
  uint32_t max_prefetch_ = 0;  // reads ahead in flight at most
  model::LayerWeights streamed_layer_;
  cache::SlotHandle layer_handle_;
  std::vector<cache::SlotHandle> expert_handles_;
};

}  // namespace df::engine
