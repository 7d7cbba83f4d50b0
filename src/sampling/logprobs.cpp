#include "diskformer/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "diskformer/util/check.h"

namespace df::sampling {

StepLogprobs step_logprobs(std::span<const float> logits, int32_t chosen, int n_top) {
  DF_CHECK(!logits.empty() && chosen >= 0 && size_t(chosen) < logits.size());
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double(l) - double(mx));
  const double lse = double(mx) + std::log(sum);
  auto lp = [&](int32_t i) { return float(double(logits[size_t(i)]) - lse); };

  StepLogprobs out;
  out.chosen = {chosen, lp(chosen)};
  const size_t n = std::min<size_t>(size_t(std::max(n_top, 0)), logits.size());
  if (n == 0) return out;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + long(n), ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  out.top.reserve(n);
  for (size_t i = 0; i < n; ++i) out.top.push_back({ids[i], lp(ids[i])});
  return out;
}

}  // namespace df::sampling
