// engine::Decoder on the GPU: a GpuSession over a resident GpuModel, tokens chosen on the device
// (device_sampler.h), so run and chat drive it as they drive the CPU engine.
//
//   DF_ASSIGN(std::shared_ptr<const cuda::GpuModel> gpu, cuda::GpuModel::upload(host->spec(), host->weights()));
//   DF_ASSIGN(auto d, cuda::GpuDecoder::create(gpu, {.n_ctx = host->n_ctx(), .decode_graph = true}));
//   auto st = engine::generate(*d, prompt_ids, options, hooks, history);
#pragma once

#include <memory>
#include <string>

#include "diskformer/backend/cuda/device_sampler.h"
#include "diskformer/backend/cuda/gpu_forward.h"
#include "diskformer/engine/decoder.h"

namespace df::cuda {

class GpuDecoder final : public engine::Decoder {
 public:
  // Errors: not enough GPU memory for the session (with the sizes), as GpuSession::create.
  static Result<std::unique_ptr<GpuDecoder>> create(std::shared_ptr<const GpuModel> model,
                                                    const GpuSessionOptions& options);

  Status eval(std::span<const int32_t> tokens) override;
  int32_t next_token(engine::Sampler& sampler, std::span<const int32_t> history) override;
  uint32_t n_past() const override { return session_->n_past(); }
  uint32_t n_ctx() const override { return session_->n_ctx(); }
  void truncate(uint32_t n_keep) override { session_->truncate(n_keep); }
  // The driver-reported device use is sampled at creation, after each eval of several tokens, and here.
  engine::DecoderStats stats() override;
  GpuSession& session() { return *session_; }

 private:
  GpuDecoder() = default;
  void sample_memory();

  std::shared_ptr<const GpuModel> model_;
  std::unique_ptr<GpuSession> session_;
  DeviceSampler sampler_;
  std::string device_name_;
  uint64_t used_peak_ = 0;
};

}  // namespace df::cuda
