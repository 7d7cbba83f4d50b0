// Several sessions of one model stepping together: one decode step for all of them, so that each weight and each
// routed expert a step needs is read once for every sequence that uses it (the server's slots step this way).
//
//   std::vector<engine::Session*> ss = {&a, &b};
//   std::vector<int32_t> next = {ta, tb};
//   DF_TRY(engine::decode_batch(*model, ss, next));   // a.logits() and b.logits() are their own rows now
//
// On the CPU the step is one forward pass whose products take their one-row orders: each session's logits are
// bit-identical to what session.eval({token}) alone gives. On CUDA too (cuda::GpuSession::decode_many), each token's
// attention over its own session's cache. Families without a multi-sequence forward (gemma4, qwen35moe) step the
// sessions one after another, with the same results.
#pragma once

#include <cstdint>
#include <span>

#include "diskformer/engine/model.h"
#include "diskformer/engine/session.h"

namespace df::engine {

// Appends tokens[i] to sessions[i] (distinct sessions of `model`, as many as tokens). Errors: a session whose
// context is full or a token outside the vocabulary (nothing is evaluated), a failed read of a streamed record
// (no session advances on the CPU).
Status decode_batch(Model& model, std::span<Session* const> sessions, std::span<const int32_t> tokens);

}  // namespace df::engine
