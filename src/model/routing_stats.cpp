#include "diskformer/model/routing_stats.h"

#include <algorithm>
#include <cmath>

#include "diskformer/util/check.h"

namespace df::model {

RoutingStats::RoutingStats(uint32_t n_layer, uint32_t n_expert_, uint32_t n_used_)
    : n_expert(n_expert_),
      n_used(n_used_),
      counts(n_layer, std::vector<uint64_t>(n_expert_)),
      reused(n_layer),
      transitions(n_layer),
      last(n_layer) {}

void RoutingStats::record(uint32_t layer, const int32_t* sel, int64_t n_tok) {
  DF_CHECK(layer < counts.size());
  for (int64_t t = 0; t < n_tok; ++t) {
    const int32_t* cur = sel + t * n_used;
    for (uint32_t k = 0; k < n_used; ++k) {
      DF_CHECK(cur[k] >= 0 && uint32_t(cur[k]) < n_expert);
      ++counts[layer][uint32_t(cur[k])];
    }
    auto& prev = last[layer];
    if (!prev.empty()) {
      for (uint32_t k = 0; k < n_used; ++k) reused[layer] += std::count(prev.begin(), prev.end(), cur[k]);
      ++transitions[layer];
    }
    prev.assign(cur, cur + n_used);
  }
}

void RoutingStats::break_sequence() {
  for (auto& l : last) l.clear();
}

uint64_t RoutingStats::tokens(uint32_t layer) const {
  uint64_t n = 0;
  for (uint64_t c : counts[layer]) n += c;
  return n_used ? n / n_used : 0;
}

double RoutingStats::share(uint32_t layer, uint32_t e) const {
  const uint64_t all = tokens(layer) * n_used;
  return all ? double(counts[layer][e]) / double(all) : 0.0;
}

double RoutingStats::reuse(uint32_t layer) const {
  return transitions[layer] ? double(reused[layer]) / double(transitions[layer] * n_used) : 0.0;
}

double RoutingStats::evenness(uint32_t layer) const {
  if (n_expert < 2) return 1.0;
  double h = 0.0;
  for (uint32_t e = 0; e < n_expert; ++e) {
    const double p = share(layer, e);
    if (p > 0) h -= p * std::log(p);
  }
  return h / std::log(double(n_expert));
}

}  // namespace df::model
