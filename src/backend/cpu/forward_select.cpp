#include "diskformer/backend/cpu/forward.h"
#include "diskformer/backend/cpu/forward_gemma4.h"

namespace df::cpu {

std::unique_ptr<ForwardPass> make_forward(const model::ModelSpec& spec, const ForwardWeights& weights, Context& ctx) {
  if (spec.family == model::Family::kGemma4) return std::make_unique<Gemma4Forward>(spec, weights, ctx);
  return std::make_unique<Forward>(spec, weights, ctx);
}

}  // namespace df::cpu
