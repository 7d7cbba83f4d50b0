// What synth writes, tensor by tensor, in file order (each architecture's list: synth.cpp, qwen35.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diskformer/gguf/types.h"
#include "diskformer/synth/synth.h"

namespace df::synth {

struct Planned {
  std::string name;
  gguf::GgmlType type;
  std::vector<uint64_t> shape;
  // Matrix: random codes of stddev (any type); Router: f32 values of stddev; Norm: f32 near 1; Uniform: f32 drawn
  // from [lo, hi).
  enum Kind { Matrix, Norm, Router, Uniform } kind;
  float stddev;
  float lo = 0.0f, hi = 0.0f;
};

// qwen35moe's tensors: Gated DeltaNet or attention blocks as the shape's interval says, routed and shared experts.
std::vector<Planned> plan_qwen35moe_tensors(const Shape& s, gguf::GgmlType type, uint64_t n_vocab);

}  // namespace df::synth
