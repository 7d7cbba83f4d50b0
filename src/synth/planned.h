// What synth writes, tensor by tensor, in file order: each architecture's list (synth.cpp, gemma4.cpp, qwen35.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "diskformer/gguf/types.h"
#include "diskformer/gguf/writer.h"
#include "diskformer/synth/synth.h"

namespace df::synth {

struct Planned {
  std::string name;
  gguf::GgmlType type;
  std::vector<uint64_t> shape;
  enum Kind {
    Matrix,  // symmetric random codes of `stddev`
    Norm,    // f32 near 1 (0.9 .. 1.1), as trained norm weights and scales are
    Router,   // f32 random of `stddev`
    Uniform,  // f32 drawn from [lo, hi)
    Values,   // f32 `values` as given
  } kind;
  float stddev = 0.0f;
  float lo = 0.0f, hi = 0.0f;
  std::vector<float> values;
};

// qwen35moe (qwen35.cpp): Gated DeltaNet or attention blocks as the shape's interval says, routed and shared experts.
std::vector<Planned> plan_qwen35moe_tensors(const Shape& s, gguf::GgmlType type, std::optional<Mix> mix,
                                            uint64_t n_vocab);

// gemma4 (gemma4.cpp): the shape's checks, its metadata keys as llama.cpp's converter writes them, its tensors.
Status check_gemma4_shape(const Shape& s);
void set_gemma4_metadata(gguf::Writer& w, const Shape& s, const std::string& name, uint32_t file_type);
std::vector<Planned> plan_gemma4_tensors(const Shape& s, gguf::GgmlType type, std::optional<Mix> mix,
                                         uint64_t n_vocab);
std::optional<Shape> gemma4_preset(const std::string& name);
std::vector<std::string> gemma4_preset_names();

}  // namespace df::synth
