// Small models with random weights written through gguf::Writer, with knobs to break them (a missing tensor, a
// wrong shape, an unsupported type or architecture) for the engine's tests.
#pragma once

#include <cstdint>
#include <string>

#include "diskformer/gguf/types.h"
#include "diskformer/util/result.h"

namespace df::test {

struct TinyModel {
  std::string arch = "qwen3moe";  // general.architecture
  gguf::GgmlType type = gguf::GgmlType::Q4_0;
  uint32_t n_layer = 4, n_embd = 64, n_head = 2, n_head_kv = 1, head_dim = 32;
  uint32_t n_ff = 128;                                  // dense layers
  uint32_t n_expert = 16, n_expert_used = 2, n_ff_expert = 64;  // n_expert = 0: dense
  uint32_t n_vocab = 256;                               // replaced by the tokenizer's where one is copied
  bool tied_output = false;
  uint64_t seed = 1;
  // A tokenizer (tokenizer.* metadata) copied from this GGUF, so that run and chat take the model; eos_id, where
  // >= 0, replaces its tokenizer.ggml.eos_token_id.
  std::string tokenizer_from;
  int32_t eos_id = -1;
  // Breakage:
  std::string drop_tensor;        // leave this tensor out
  std::string widen_tensor;       // add one row to this tensor's last dimension
  std::string retype_tensor;      // write this tensor as MXFP4 (a type the CPU kernels do not multiply)
};

Status write_tiny_model(const std::string& path, const TinyModel& m);

}  // namespace df::test
