// How a device tier lays out its slots: a record's part p goes to plane p, each plane an array of equal strides,
// so that slot s of a plane reads like expert s of a stacked tensor. Host arithmetic, shared by the tier and the
// planners that size it.
#pragma once

#include <cstdint>
#include <vector>

namespace df::cache {

// Part of a record: `bytes` at `offset` of the RAM tier's slot image.
struct PartPlace {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// parts[layer][p] (layers without records have none) -> each plane's stride: its part's largest size over the
// layers, rounded up to 256 bytes (vector loads, cache lines).
std::vector<uint64_t> plane_strides(const std::vector<std::vector<PartPlace>>& parts);
// The sum of the strides: the device bytes of one slot.
uint64_t plane_slot_bytes(const std::vector<std::vector<PartPlace>>& parts);

}  // namespace df::cache
