#include "diskformer/backend/cuda/device_sampler.h"

#include <algorithm>

#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/backend/cuda/select.h"
#include "diskformer/util/check.h"

namespace df::cuda {

void DeviceSampler::grow(DeviceBuffer& b, uint64_t bytes) {
  if (b.size() < bytes) b = DeviceBuffer(bytes);
}

int32_t DeviceSampler::sample(sampling::Sampler& sampler, const float* logits, int64_t n_vocab, cudaStream_t stream,
                              std::span<const int32_t> history) {
  DF_CHECK(logits != nullptr && n_vocab > 0 && n_vocab <= 0x7fffffff);
  const sampling::SamplingParams& p = sampler.params();
  const bool greedy = p.temp <= 0.0f;
  const bool top_k_cut = p.top_k > 0 && int64_t(p.top_k) < n_vocab;

  if (!greedy && !top_k_cut) {
    // The draw looks at every token: the sampler runs on the whole row, penalty included.
    logits_host_.resize(size_t(n_vocab));
    DF_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data(), logits, uint64_t(n_vocab) * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream));
    DF_CUDA_CHECK(cudaStreamSynchronize(stream));
    return sampler.sample(logits_host_, history);
  }

  // The penalized ids as the CPU sampler's set: distinct ids of the last repeat_last_n tokens (all with -1). Ids
  // outside the vocabulary match no candidate there, so they are dropped here.
  recent_host_.clear();
  if (p.repeat_penalty != 1.0f && p.repeat_last_n != 0) {
    const size_t n = p.repeat_last_n < 0 ? history.size() : std::min<size_t>(history.size(), size_t(p.repeat_last_n));
    for (int32_t id : history.subspan(history.size() - n))
      if (id >= 0 && int64_t(id) < n_vocab) recent_host_.push_back(id);
    std::sort(recent_host_.begin(), recent_host_.end());
    recent_host_.erase(std::unique(recent_host_.begin(), recent_host_.end()), recent_host_.end());
  }
  banned_host_.clear();
  for (int32_t id : p.banned)
    if (id >= 0 && int64_t(id) < n_vocab) banned_host_.push_back(id);
  const bool adjusted = !recent_host_.empty() || !banned_host_.empty();
  const float* x = logits;
  if (adjusted) {
    grow(work_, uint64_t(n_vocab) * sizeof(float));
    if (!recent_host_.empty()) {
      grow(recent_, recent_host_.size() * sizeof(int32_t));
      DF_CUDA_CHECK(cudaMemcpyAsync(recent_.data(), recent_host_.data(), recent_host_.size() * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, stream));
    }
    // Copies the row (penalized where recent_host_ names ids); the bans then apply to the copy, as the CPU sampler
    // sets them before its penalty (-inf stays -inf under it).
    repeat_penalty({.x = logits, .out = work_.as<float>(), .ids = recent_.as<int32_t>(), .n = n_vocab,
                    .n_ids = int64_t(recent_host_.size()), .penalty = p.repeat_penalty, .stream = stream});
    if (!banned_host_.empty()) {
      grow(banned_, banned_host_.size() * sizeof(int32_t));
      DF_CUDA_CHECK(cudaMemcpyAsync(banned_.data(), banned_host_.data(), banned_host_.size() * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, stream));
      ban_tokens({.x = work_.as<float>(), .ids = banned_.as<int32_t>(), .n = n_vocab,
                  .n_ids = int64_t(banned_host_.size()), .stream = stream});
    }
    x = work_.as<float>();
  }

  if (greedy && !adjusted) {
    grow(top_i_, sizeof(int32_t));
    argmax({.x = x, .n_rows = 1, .n = n_vocab, .out = top_i_.as<int32_t>(), .stream = stream});
    int32_t id = 0;
    DF_CUDA_CHECK(cudaMemcpyAsync(&id, top_i_.data(), sizeof id, cudaMemcpyDeviceToHost, stream));
    DF_CUDA_CHECK(cudaStreamSynchronize(stream));
    return id;
  }

  const int32_t k = greedy ? 1 : p.top_k;
  grow(top_v_, uint64_t(k) * sizeof(float));
  grow(top_i_, uint64_t(k) * sizeof(int32_t));
  grow(top_work_, top_k_work_bytes());
  top_k({.x = x, .n = n_vocab, .k = k, .values = top_v_.as<float>(), .ids = top_i_.as<int32_t>(),
         .work = top_work_.data(), .stream = stream});
  values_host_.resize(size_t(k));
  ids_host_.resize(size_t(k));
  DF_CUDA_CHECK(cudaMemcpyAsync(values_host_.data(), top_v_.data(), uint64_t(k) * sizeof(float),
                                cudaMemcpyDeviceToHost, stream));
  DF_CUDA_CHECK(cudaMemcpyAsync(ids_host_.data(), top_i_.data(), uint64_t(k) * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream));
  DF_CUDA_CHECK(cudaStreamSynchronize(stream));
  top_host_.resize(size_t(k));
  for (int32_t i = 0; i < k; ++i) top_host_[size_t(i)] = {values_host_[size_t(i)], ids_host_[size_t(i)]};
  return sampler.sample_top_k(top_host_);
}

}  // namespace df::cuda
