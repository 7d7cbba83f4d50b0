#include "diskformer/engine/prefix_reuse.h"

#include <algorithm>

#include "diskformer/backend/cpu/forward.h"
#include "diskformer/util/check.h"

namespace df::engine {

namespace {

bool one_row(EvalSpan s) {
  const uint32_t n = s.end - s.begin;
  return n == 1 || n >= uint32_t(cpu::kTiledAttentionRows);
}

// The batch a fresh evaluation of the prompt in batches of n_batch computes position i in.
EvalSpan fresh_span(uint32_t i, uint32_t n, uint32_t n_batch) {
  const uint32_t b = i / n_batch * n_batch;
  return {b, std::min(n, b + n_batch)};
}

}  // namespace

PrefixPlan plan_prefix(std::span<const int32_t> cached, std::span<const EvalSpan> spans,
                       std::span<const int32_t> prompt, uint32_t n_batch, bool exact) {
  DF_CHECK(n_batch > 0 && spans.size() == cached.size());
  PrefixPlan plan;
  const uint32_t n = uint32_t(prompt.size());
  if (n == 0) return plan;
  uint32_t keep = 0;
  const uint32_t limit = std::min<uint32_t>(uint32_t(cached.size()), n - 1);
  while (keep < limit && cached[keep] == prompt[keep]) {
    if (exact) {
      const EvalSpan f = fresh_span(keep, n, n_batch), c = spans[keep];
      if (!(one_row(f) && one_row(c)) && !(f == c)) break;
    }
    ++keep;
  }
  if (exact) {
    // A fresh batch that takes batch-dependent orders is kept whole or evaluated whole.
    const EvalSpan f = fresh_span(keep, n, n_batch);
    if (!one_row(f) && keep > f.begin) keep = f.begin;
  }
  plan.keep = keep;
  uint32_t pos = keep;
  while (pos < n) {
    const EvalSpan f = fresh_span(pos, n, n_batch);
    PrefixStep step{.begin = pos, .end = f.end};
    // The rest of a one-row batch, too short to take one-row orders as one batch, goes one token at a time.
    if (exact && pos > f.begin && !one_row({pos, f.end})) step.one_by_one = true;
    if (!exact) step.end = std::min(n, pos + n_batch);
    plan.steps.push_back(step);
    pos = step.end;
  }
  return plan;
}

void record_spans(const PrefixStep& step, std::vector<EvalSpan>& spans) {
  for (uint32_t i = step.begin; i < step.end; ++i)
    spans.push_back(step.one_by_one ? EvalSpan{i, i + 1} : EvalSpan{step.begin, step.end});
}

}  // namespace df::engine
