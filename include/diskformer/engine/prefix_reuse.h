// Reusing a session's cached prefix for a new prompt without changing a bit of the result. Products over a batch
// of tokens do not all round as they do for one token (llama.cpp's orders on the CPU: f32/f16 products of several
// rows go through its tiled routine, Q4_K pairs rows in fours, attention of 64 queries or more takes its tiled
// kernel), so a position computed in one batch may differ in its last bits from the same position computed in
// another, and a greedy choice can follow those bits. On the CPU a batch of one token computes its position in the
// one-row orders; a larger batch computes them in orders that depend on the batch. So a cached position reproduces
// a fresh evaluation of the prompt (in batches of n_batch) where both computed it as a batch of one, or both in the
// very same batch; and what is evaluated after the kept prefix must take, position by position, the orders the
// fresh evaluation takes. plan_prefix() says how much to keep and how to evaluate the rest so that it does.
//
// A CUDA session's batch kernels round differently from its single-token ones in ways this rule does not describe;
// there the plan keeps the longest common prefix (as chat does), and a reused prefix can change the last digits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace df::engine {

// The batch of one eval() that computed a position: positions [begin, end). A decode step is a batch of one.
struct EvalSpan {
  uint32_t begin = 0, end = 0;
  bool operator==(const EvalSpan&) const = default;
};

struct PrefixStep {
  uint32_t begin = 0, end = 0;  // prompt positions [begin, end), as one eval()
};

struct PrefixPlan {
  uint32_t keep = 0;               // cached positions kept (truncate(keep)); the steps evaluate [keep, prompt size)
  std::vector<PrefixStep> steps;   // in order; each at most n_batch tokens
};

// cached: the tokens the session holds, spans[i] the batch that computed position i (as many as cached). At least
// the prompt's last token is evaluated, so that its logits are fresh. exact: the CPU's rule above; otherwise the
// longest common prefix is kept.
PrefixPlan plan_prefix(std::span<const int32_t> cached, std::span<const EvalSpan> spans,
                       std::span<const int32_t> prompt, uint32_t n_batch, bool exact);

// The spans a plan's evaluation gives positions [keep, prompt size) (to record beside the kept ones).
void record_spans(const PrefixStep& step, std::vector<EvalSpan>& spans);

}  // namespace df::engine
