#include "diskformer/engine/prefix_reuse.h"

#include <algorithm>

#include "diskformer/backend/cpu/ops.h"
#include "diskformer/util/check.h"

namespace df::engine {

namespace {

// The orders in which the batch s computes its position i on the CPU: as a batch of one, or among several rows
// (f32/f16 products in tiles), with attention by the tiled kernel (kTiledRows queries or more), and in one of Q4_K's
// groups of four rows from the batch start (the last n % 4 rows go alone). Two evaluations whose positions so far
// took the same orders hold the same bits.
struct Orders {
  bool single, tiled, grouped;
  bool operator==(const Orders&) const = default;
};

Orders orders(EvalSpan s, uint32_t i) {
  const uint32_t n = s.end - s.begin;
  return {n == 1, n >= uint32_t(cpu::kTiledRows), n > 1 && i - s.begin < n - n % 4};
}

// Whether the batch [b, e) computes each of its positions in the orders of the fresh batch f.
bool same_orders(EvalSpan f, uint32_t b, uint32_t e) {
  for (uint32_t i = b; i < e; ++i)
    if (!(orders({b, e}, i) == orders(f, i))) return false;
  return true;
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
    if (exact && !(orders(fresh_span(keep, n, n_batch), keep) == orders(spans[keep], keep))) break;
    ++keep;
  }
  if (exact) {
    // The rest of a fresh batch goes as one batch: keep less where that batch would not give its positions the
    // fresh batch's orders (at worst the fresh batch is evaluated whole).
    const EvalSpan f = fresh_span(keep, n, n_batch);
    while (keep > f.begin && !same_orders(f, keep, f.end)) --keep;
  }
  plan.keep = keep;
  uint32_t pos = keep;
  while (pos < n) {
    const EvalSpan f = fresh_span(pos, n, n_batch);
    PrefixStep step{.begin = pos, .end = f.end};
    if (!exact) step.end = std::min(n, pos + n_batch);
    plan.steps.push_back(step);
    pos = step.end;
  }
  return plan;
}

void record_spans(const PrefixStep& step, std::vector<EvalSpan>& spans) {
  for (uint32_t i = step.begin; i < step.end; ++i) spans.push_back({step.begin, step.end});
}

}  // namespace df::engine
