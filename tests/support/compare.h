// Comparisons the tests share.
#pragma once
#include <cstring>
#include <span>

namespace df::test {

// Equal lengths and every float equal bit for bit (NaNs and signed zeros included).
inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace df::test
