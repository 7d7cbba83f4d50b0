#include "diskformer/backend/cuda/gpu_decoder.h"

#include <algorithm>

#include "diskformer/backend/cuda/gpu_load.h"
#include "diskformer/backend/cuda_device.h"
#include "diskformer/util/check.h"

namespace df::cuda {

Result<std::unique_ptr<GpuDecoder>> GpuDecoder::create(std::shared_ptr<const GpuModel> model,
                                                       const GpuSessionOptions& options) {
  DF_CHECK(model != nullptr);
  std::unique_ptr<GpuDecoder> d(new GpuDecoder());
  DF_ASSIGN(d->session_, GpuSession::create(*model, options));
  d->model_ = std::move(model);
  d->device_name_ = query_devices().name;
  d->sample_memory();
  return d;
}

// What nvidia-smi counts for the device: every process's allocations and contexts (bench reports the same).
void GpuDecoder::sample_memory() { used_peak_ = std::max(used_peak_, device_memory_used()); }

Status GpuDecoder::eval(std::span<const int32_t> tokens) {
  DF_TRY(session_->eval(tokens));
  if (tokens.size() > 1) sample_memory();
  return {};
}

int32_t GpuDecoder::next_token(engine::Sampler& sampler, std::span<const int32_t> history) {
  return sampler_.sample(sampler, session_->last_logits_device(), int64_t(model_->spec().n_vocab),
                         session_->stream(), history);
}

engine::DecoderStats GpuDecoder::stats() {
  sample_memory();
  engine::DecoderStats st{.backend = "cuda",
                          .device = device_name_,
                          .device_bytes = model_->device_bytes() + session_->device_bytes() + sampler_.device_bytes(),
                          .device_used_peak = used_peak_};
  if (GpuExpertCache* cache = model_->expert_cache()) {
    const ExpertCacheStats c = cache->stats();
    st.device_bytes = *st.device_bytes + cache->device_bytes();
    st.expert_hit_rate = c.table.hit_rate();
    st.bytes_to_device = c.table.bytes_loaded;
  }
  return st;
}

}  // namespace df::cuda
