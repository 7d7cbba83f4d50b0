// A model's tensors: where they are in the file (bind_tensors, validated against the spec) and the in-memory views
// the forward pass reads (Mat, LayerWeights), supplied by a WeightSource that decides what is resident and what is
// streamed from disk.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/model/spec.h"
#include "diskformer/util/result.h"

namespace df::model {

// A matrix in memory: `rows` rows of `cols` elements of `type`; row r starts at data + r * row_bytes.
// A 1-D tensor (norm weights) is one row.
struct Mat {
  gguf::GgmlType type = gguf::GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t cols = 0;
  int64_t rows = 0;
  uint64_t row_bytes = 0;

  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes; }
  const float* f32() const { return reinterpret_cast<const float*>(data); }
  // Rows [first, first + count) as a matrix of their own (one expert of a stacked expert tensor).
  Mat slice(int64_t first, int64_t count) const { return {type, row(first), cols, count, row_bytes}; }
};

// The file's tensors of one block; nullptr where this family or layout has none.
struct LayerTensors {
  const gguf::TensorInfo* attn_norm = nullptr;  // [n_embd] f32
  const gguf::TensorInfo* wq = nullptr;         // [n_head * head_dim_k] rows of [n_embd]
  const gguf::TensorInfo* wk = nullptr;         // [n_head_kv * head_dim_k] x [n_embd]
  const gguf::TensorInfo* wv = nullptr;         // [n_head_kv * head_dim_v] x [n_embd]
  const gguf::TensorInfo* wo = nullptr;         // [n_embd] x [n_head * head_dim_v]
  const gguf::TensorInfo* q_norm = nullptr;     // [head_dim_k] f32 (qwen3 families)
  const gguf::TensorInfo* k_norm = nullptr;     // [head_dim_k] f32
  const gguf::TensorInfo* ffn_norm = nullptr;   // [n_embd] f32
  const gguf::TensorInfo* ffn_gate = nullptr;   // dense: [n_ff] x [n_embd]
  const gguf::TensorInfo* ffn_up = nullptr;     // dense: [n_ff] x [n_embd]
  const gguf::TensorInfo* ffn_down = nullptr;   // dense: [n_embd] x [n_ff]
  const gguf::TensorInfo* gate_inp = nullptr;   // router: [n_expert] x [n_embd]
  const gguf::TensorInfo* gate_exps = nullptr;  // [n_expert][n_ff_expert] x [n_embd]
  const gguf::TensorInfo* up_exps = nullptr;    // [n_expert][n_ff_expert] x [n_embd]
  const gguf::TensorInfo* down_exps = nullptr;  // [n_expert][n_embd] x [n_ff_expert]

  bool moe() const { return gate_exps != nullptr; }
  // Every tensor of the block except the routed experts, in file order of the fields above.
  std::vector<const gguf::TensorInfo*> dense() const;
};

struct ModelTensors {
  const gguf::TensorInfo* token_embd = nullptr;   // [n_vocab] x [n_embd]
  const gguf::TensorInfo* output_norm = nullptr;  // [n_embd] f32
  const gguf::TensorInfo* output = nullptr;       // [n_vocab] x [n_embd]; token_embd where the file has no output
  std::vector<LayerTensors> layers;
};

// Finds every tensor the family needs and checks its shape and type; errors name the file and the tensor.
Result<ModelTensors> bind_tensors(const gguf::File& f, const ModelSpec& spec);

// Weight types the CPU kernels multiply: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K .. Q6_K, IQ4_XS.
bool matmul_type_supported(gguf::GgmlType t);

// The in-memory views of one block (Mat.data == nullptr where the block has no such tensor). Routed experts
// are not here: a WeightSource hands them out by id.
struct LayerWeights {
  Mat attn_norm, wq, wk, wv, wo, q_norm, k_norm, ffn_norm;
  Mat ffn_gate, ffn_up, ffn_down;
  Mat gate_inp;
};

// One routed expert: gate and up [n_ff_expert] x [n_embd], down [n_embd] x [n_ff_expert].
struct ExpertWeights {
  Mat gate, up, down;
};

// Supplies weights to the forward pass. Views stay valid until the next call of the same method for another layer
// (a streaming source reuses its buffers); calls go in layer order within one forward pass.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const Mat& token_embd() const = 0;
  virtual const Mat& output_norm() const = 0;
  virtual const Mat& output() const = 0;
  // The dense tensors of block il; a streaming source may read them now (and start reading block il + 1).
  virtual Result<const LayerWeights*> layer(uint32_t il) = 0;
  // Routed experts of block il, in the order of ids (distinct ids).
  virtual Result<std::vector<ExpertWeights>> experts(uint32_t il, std::span<const int32_t> ids) = 0;
  // The most distinct experts one experts() call may ask for (a streaming pool's size); 0 = no limit.
  virtual uint32_t max_experts_per_call() const { return 0; }
  // Experts of block il likely needed soon: a streaming source starts reading them and returns at once.
  // wants_expert_guesses() says whether guessing is worth the router products.
  virtual bool wants_expert_guesses() const { return false; }
  virtual void prefetch_experts(uint32_t il, std::span<const int32_t> ids) {}
  // The dense tensors of block il where they stay resident (a guess needs the next block's norm and router
  // without disturbing a layer stream), nullptr otherwise.
  virtual const LayerWeights* resident_layer(uint32_t il) const { return nullptr; }
};

// A Mat over a tensor whose bytes start at data (as laid out in the file).
Mat mat_of(const gguf::TensorInfo& t, const uint8_t* data);

}  // namespace df::model
