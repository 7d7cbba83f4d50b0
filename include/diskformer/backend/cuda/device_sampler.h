// sampling::Sampler's choice from logits that live on the GPU, with the work that grows with the vocabulary done
// there: the repeat penalty and the top-k cut run as kernels (select.h) and only the k survivors come back, where
// Sampler::sample_top_k finishes (top-p, min-p, temperature, the seeded draw). The token equals sampler.sample() on
// the same logits copied to the host, for every setting; banned ids (SamplingParams::banned) are set to -inf in a
// copy of the logits with the penalty, so that no path can choose them:
//   temperature 0, no penalty, no bans  -> argmax kernel, one id back
//   temperature 0, penalty or bans      -> penalty and bans + top-1
//   0 < top_k < n_vocab                 -> penalty and bans (if any) + top-k, k pairs back
//   top-k off (or >= n_vocab)     -> the draw needs the whole distribution: the logits row is copied back
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "diskformer/cudart/buffer.h"
#include "diskformer/sampling/sampler.h"

namespace df::cuda {

class DeviceSampler {
 public:
  // logits: [n_vocab] on the device, written by work queued on `stream` (read in stream order; the call returns
  // after its results are on the host). history as Sampler::sample.
  int32_t sample(sampling::Sampler& sampler, const float* logits, int64_t n_vocab, cudaStream_t stream,
                 std::span<const int32_t> history);
  // Device memory of the work buffers (they grow to the largest vocabulary, k and penalty window seen).
  uint64_t device_bytes() const {
    return work_.size() + recent_.size() + banned_.size() + top_v_.size() + top_i_.size() + top_work_.size();
  }

 private:
  static void grow(DeviceBuffer& b, uint64_t bytes);

  DeviceBuffer work_;    // [n_vocab] f32: the penalized logits, banned ids at -inf
  DeviceBuffer recent_;  // [n] int32: distinct recent ids
  DeviceBuffer banned_;  // [n] int32: banned ids inside the vocabulary
  DeviceBuffer top_v_;   // [k] f32
  DeviceBuffer top_i_;   // [k] int32
  DeviceBuffer top_work_;  // top_k's scratch
  std::vector<int32_t> recent_host_;
  std::vector<int32_t> banned_host_;
  std::vector<float> values_host_;
  std::vector<int32_t> ids_host_;
  std::vector<std::pair<float, int32_t>> top_host_;
  std::vector<float> logits_host_;
};

}  // namespace df::cuda
