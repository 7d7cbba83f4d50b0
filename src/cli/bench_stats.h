// Summaries bench prints for each configuration: median, min and max over the repetitions.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

namespace df::cli {

struct Summary {
  double median = 0, min = 0, max = 0;
};

inline Summary summarize(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}

inline nlohmann::json summary_json(const Summary& s, bool present) {
  if (!present) return nullptr;
  return nlohmann::json{{"median", s.median}, {"min", s.min}, {"max", s.max}};
}

}  // namespace df::cli
