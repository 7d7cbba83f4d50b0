// A CPU sequence of a hybrid model (qwen35moe): the attention layers' KV cache, the DeltaNet layers' recurrent
// state, and copies of that state at a few positions, so that truncate() -- chat's reuse of the conversation's
// prefix -- can go back although a recurrent state cannot be cut: the nearest copy at or before the kept length is
// restored, and the positions between are computed again in the same batch as the next eval's tokens.
//
// Copies: an eval of two tokens or more (a prompt) keeps the state at its end and kSnapshotLead positions before
// it -- a chat template renders the last tokens of its generation prompt differently once the reply is in the
// history -- and the newest kStateSnapshots copies stay (their storage reused: a sequence holds at most the live
// state, the copies and one spare).
#pragma once

#include <cstdint>
#include <memory>

#include "diskformer/backend/cpu/forward.h"
#include "diskformer/engine/model.h"
#include "diskformer/model/spec.h"
#include "engine/sequence.h"

namespace df::engine {

constexpr uint32_t kStateSnapshots = 4;
constexpr uint32_t kSnapshotLead = 8;

// The recurrent state a sequence holds with its copies (what the RAM plan counts per sequence).
uint64_t hybrid_state_bytes(const model::ModelSpec& spec);

// weights: the CPU backend's views (resident layers, the RAM tier of experts); they outlive the sequence.
std::unique_ptr<Sequence> new_hybrid_cpu_sequence(Model& model, const cpu::ForwardWeights& weights);

}  // namespace df::engine
