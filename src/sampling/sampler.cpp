#include "diskformer/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "diskformer/util/check.h"

namespace df::sampling {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = int32_t(i);
  return best;
}

namespace {
// Best first: the higher logit, then the lower id (a strict total order, so every backend sorts alike).
bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}
// Greedy: the highest logit, the lowest id on ties.
int32_t greedy(const std::vector<std::pair<float, int32_t>>& cand) {
  auto best = std::max_element(cand.begin(), cand.end(), [](const auto& a, const auto& b) {
    return a.first < b.first || (a.first == b.first && a.second > b.second);
  });
  return best->second;
}
}  // namespace

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  cand_.clear();
  cand_.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cand_.push_back({logits[i], int32_t(i)});
  for (int32_t id : p_.banned)
    if (id >= 0 && size_t(id) < cand_.size()) cand_[size_t(id)].first = -INFINITY;

  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n != 0) {
    const size_t n = p_.repeat_last_n < 0 ? history.size() : std::min<size_t>(history.size(), p_.repeat_last_n);
    std::unordered_set<int32_t> recent(history.end() - n, history.end());
    for (auto& [l, id] : cand_)
      if (recent.count(id)) l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
  }
  if (p_.temp <= 0.0f) return greedy(cand_);

  size_t keep = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < keep) {
    keep = size_t(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
    cand_.resize(keep);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  return draw();
}

int32_t Sampler::sample_top_k(std::span<const std::pair<float, int32_t>> top) {
  DF_CHECK(!top.empty());
  cand_.assign(top.begin(), top.end());
  if (p_.temp <= 0.0f) return greedy(cand_);
  // partial_sort in sample() leaves the same k candidates in this order.
  std::sort(cand_.begin(), cand_.end(), by_logit);
  return draw();
}

int32_t Sampler::draw() {
  // Probabilities of the survivors (sorted, highest first).
  auto probs = [&] {
    std::vector<double> p(cand_.size());
    double sum = 0;
    for (size_t i = 0; i < cand_.size(); ++i) sum += p[i] = std::exp(double(cand_[i].first - cand_[0].first));
    for (auto& x : p) x /= sum;
    return p;
  };
  if (p_.top_p < 1.0f) {
    const auto p = probs();
    double cum = 0;
    size_t n = 0;
    while (n < p.size()) {
      cum += p[n++];
      if (cum >= p_.top_p) break;
    }
    cand_.resize(std::max<size_t>(n, 1));
  }
  if (p_.min_p > 0.0f) {
    const auto p = probs();
    size_t n = 1;
    while (n < p.size() && p[n] >= p_.min_p * p[0]) ++n;
    cand_.resize(n);
  }
  for (auto& c : cand_) c.first /= p_.temp;
  const auto p = probs();
  std::discrete_distribution<size_t> pick(p.begin(), p.end());
  return cand_[pick(rng_)].second;
}

}  // namespace df::sampling
