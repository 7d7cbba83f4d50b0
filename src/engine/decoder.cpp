#include "diskformer/engine/decoder.h"

namespace df::engine {

CpuDecoder::CpuDecoder(Model& model) : owned_(std::make_unique<Session>(model)), s_(*owned_) {}

int32_t CpuDecoder::next_token(Sampler& sampler, std::span<const int32_t> history) {
  return sampler.sample(s_.logits(), history);
}

}  // namespace df::engine
