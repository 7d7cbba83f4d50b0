#include "diskformer/cache/planes.h"

#include <algorithm>

namespace df::cache {

std::vector<uint64_t> plane_strides(const std::vector<std::vector<PartPlace>>& parts) {
  constexpr uint64_t kAlign = 256;
  std::vector<uint64_t> s;
  for (const auto& layer : parts) {
    if (s.size() < layer.size()) s.resize(layer.size(), 0);
    for (size_t p = 0; p < layer.size(); ++p) s[p] = std::max(s[p], (layer[p].bytes + kAlign - 1) / kAlign * kAlign);
  }
  return s;
}

uint64_t plane_slot_bytes(const std::vector<std::vector<PartPlace>>& parts) {
  uint64_t total = 0;
  for (uint64_t s : plane_strides(parts)) total += s;
  return total;
}

}  // namespace df::cache
