// A CPU sequence of a hybrid model (qwen35moe): the attention layers' KV cache, the DeltaNet layers' recurrent
// state, and copies of that state at a few positions (model/state_copies.h says which and why), so that truncate()
// can go back although a recurrent state cannot be cut.
#pragma once

#include <cstdint>
#include <memory>

#include "diskformer/backend/cpu/forward.h"
#include "diskformer/engine/model.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/state_copies.h"
#include "engine/sequence.h"

namespace df::engine {

// The recurrent state a sequence holds with its copies (what the RAM plan counts per sequence).
uint64_t hybrid_state_bytes(const model::ModelSpec& spec);

// weights: the CPU backend's views (resident layers, the RAM tier of experts); they outlive the sequence.
std::unique_ptr<Sequence> new_hybrid_cpu_sequence(Model& model, const cpu::ForwardWeights& weights);

}  // namespace df::engine
