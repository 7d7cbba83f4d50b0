// Float weights exported by a training program (one raw little-endian float32 file per tensor plus a JSON
// manifest) and their conversion into a GGUF file llama.cpp and diskformer load.
//
// DIR/manifest.json:
//   {"arch": "qwen3moe", "name": "...",
//    "hparams": {"n_layer": 8, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64, "n_ff": 512,
//                "n_expert": 16, "n_expert_used": 4, "n_ff_expert": 256, "context_length": 2048,
//                "rope_freq_base": 1e6, "rms_eps": 1e-6},
//    "tensors": [{"name": "token_embd.weight", "file": "token_embd.weight.f32", "shape": [32000, 256]}, ...]}
// Shapes are outermost first, as PyTorch prints them (the last dimension is contiguous); GGUF lists them the other
// way round. Names follow llama.cpp's (blk.N.attn_q.weight, blk.N.ffn_gate_exps.weight [n_expert][rows][cols], ...).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diskformer/gguf/types.h"
#include "diskformer/util/result.h"

namespace df::convert {

struct RawHparams {
  uint32_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  uint32_t n_ff = 0;                                      // dense width; qwen3moe writes it though no layer uses it
  uint32_t n_expert = 0, n_expert_used = 0, n_ff_expert = 0;
  uint32_t context_length = 0;
  double rope_freq_base = 1e6, rms_eps = 1e-6;
};

struct RawTensor {
  std::string name;
  std::string file;             // relative to the directory
  std::vector<uint64_t> shape;  // outermost first
  uint64_t elements() const;
};

struct RawModel {
  std::string dir;
  std::string arch, name;
  RawHparams hparams;
  std::vector<RawTensor> tensors;
};

// Reads and checks DIR/manifest.json: known architecture, hyperparameters present, every tensor file of the size its
// shape says. Errors name the file and the field.
Result<RawModel> read_raw_model(const std::string& dir);

struct ConvertOptions {
  std::string raw_dir;
  std::string tokenizer_from;                   // GGUF whose tokenizer.* metadata is copied
  gguf::GgmlType type = gguf::GgmlType::Q8_0;   // matrices; vectors (norms) and routers stay F32
  std::string out;
};

// The type a tensor gets: F32 for vectors and routers (ffn_gate_inp), as llama.cpp's converters keep them.
gguf::GgmlType tensor_type(const RawTensor& t, gguf::GgmlType matrix_type);

Status convert_raw(const ConvertOptions& options);

}  // namespace df::convert
