// Random test inputs that are the same from run to run.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace df::test {

// n normal values of standard deviation `scale`, from `seed`.
inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace df::test
