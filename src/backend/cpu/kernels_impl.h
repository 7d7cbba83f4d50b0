// Pieces shared by the kernel tables of different instruction sets.
#pragma once

#include <string_view>
#include <utility>

namespace df::cpu {

// The lane reduction every float dot product ends with (kernels.h).
inline float lanes8_sum(const float l[8]) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

}  // namespace df::cpu
