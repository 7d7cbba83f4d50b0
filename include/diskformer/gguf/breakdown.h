// Where a model's bytes are: what every token uses (embeddings rows, dense weights, output head) against what only
// some tokens use (routed experts). The residency planner and `inspect` both start from this.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "diskformer/gguf/reader.h"

namespace df::gguf {

enum class TensorCategory { TokenEmbedding, OutputHead, Dense, RoutedExperts, SharedExperts };
std::string_view category_name(TensorCategory c);
// By llama.cpp's tensor names: token_embd*, output.weight, *_exps (but not *_exps.scale), *_shexp, and everything
// else dense.
TensorCategory categorize(std::string_view tensor_name);

struct ExpertLayer {
  uint32_t layer = 0;
  uint32_t n_experts = 0;      // the expert dimension of the ffn_*_exps tensors (their last dimension)
  uint64_t record_bytes = 0;   // one expert's gate + up + down bytes in this layer
};

struct Breakdown {
  uint64_t by_category[5] = {};   // indexed by TensorCategory
  uint64_t total = 0;
  std::vector<ExpertLayer> expert_layers;  // layers that hold routed experts, in layer order
  uint64_t bytes(TensorCategory c) const { return by_category[static_cast<int>(c)]; }
};

Breakdown breakdown(const File& f);

// "blk.12.ffn_up_exps.weight" -> 12; -1 for tensors outside the blocks.
int layer_of(std::string_view tensor_name);

}  // namespace df::gguf
