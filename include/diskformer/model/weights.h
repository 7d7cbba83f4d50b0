// A model's tensors: where they are in the file (bind_tensors, validated against the spec), the views the forward
// passes read (LayerWeights, ExpertWeights: Mats in RAM or in device memory), and where resident tensors' bytes
// come from (TensorSource). What streams comes from record tiers (cache/tier.h) laid out as model/records.h says.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/model/mat.h"
#include "diskformer/model/spec.h"
#include "diskformer/util/result.h"

namespace df::model {

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
  // gemma4 (model/gemma4.h)
  const gguf::TensorInfo* attn_post_norm = nullptr;   // post_attention_norm [n_embd] f32
  const gguf::TensorInfo* ffn_post_norm = nullptr;    // post_ffw_norm [n_embd] f32: the feed-forward output's norm
  const gguf::TensorInfo* out_scale = nullptr;        // layer_output_scale [1] f32: scales the residual stream
  const gguf::TensorInfo* router_scale = nullptr;     // ffn_gate_inp.scale [n_embd] f32: the router input's scale
  const gguf::TensorInfo* ffn_pre_norm_2 = nullptr;   // pre_ffw_norm_2 [n_embd] f32: the experts' input norm
  const gguf::TensorInfo* ffn_post_norm_1 = nullptr;  // post_ffw_norm_1 [n_embd] f32: the dense MLP's output norm
  const gguf::TensorInfo* ffn_post_norm_2 = nullptr;  // post_ffw_norm_2 [n_embd] f32: the experts' sum's norm
  const gguf::TensorInfo* down_exps_scale = nullptr;  // ffn_down_exps.scale [n_expert] f32: each expert's output
  const gguf::TensorInfo* gate_up_exps = nullptr;     // [n_expert][2 n_ff_expert] x [n_embd]: gate rows, then up
  const gguf::TensorInfo* ple_gate = nullptr;         // inp_gate [n_embd_per_layer] x [n_embd]
  const gguf::TensorInfo* ple_proj = nullptr;         // proj [n_embd] x [n_embd_per_layer]
  const gguf::TensorInfo* ple_post_norm = nullptr;    // post_norm [n_embd] f32
  // qwen35moe (model/qwen35.h). Its attention layers' wq is [n_head][2][head_dim_k] rows (each head's query, then
  // its gate); its other layers are Gated DeltaNet (dims of spec.delta_net) instead of attention. ffn_norm is the
  // tensor it names post_attention_norm.
  const gguf::TensorInfo* ssm_qkv = nullptr;     // attn_qkv: [conv_dim] x [n_embd] (q, k, v channels)
  const gguf::TensorInfo* ssm_z = nullptr;       // attn_gate: [v_dim] x [n_embd] (the output gate)
  const gguf::TensorInfo* ssm_conv = nullptr;    // ssm_conv1d: [conv_dim] x [conv_kernel] f32
  const gguf::TensorInfo* ssm_dt_bias = nullptr; // ssm_dt.bias: [n_v_heads] f32
  const gguf::TensorInfo* ssm_a = nullptr;       // [n_v_heads] f32 (-exp(A_log): the decay's scale)
  const gguf::TensorInfo* ssm_beta = nullptr;    // [n_v_heads] x [n_embd]
  const gguf::TensorInfo* ssm_alpha = nullptr;   // [n_v_heads] x [n_embd]
  const gguf::TensorInfo* ssm_norm = nullptr;    // [head_dim] f32
  const gguf::TensorInfo* ssm_out = nullptr;     // [n_embd] x [v_dim]
  const gguf::TensorInfo* gate_inp_shexp = nullptr;  // [1] x [n_embd]: the shared expert's gate logit
  const gguf::TensorInfo* gate_shexp = nullptr;      // [n_ff_shared] x [n_embd]
  const gguf::TensorInfo* up_shexp = nullptr;        // [n_ff_shared] x [n_embd]
  const gguf::TensorInfo* down_shexp = nullptr;      // [n_embd] x [n_ff_shared]

  bool moe() const { return gate_exps != nullptr || gate_up_exps != nullptr; }
  // Every tensor of the block except the routed experts, in file order of the fields above.
  std::vector<const gguf::TensorInfo*> dense() const;
};

struct ModelTensors {
  const gguf::TensorInfo* token_embd = nullptr;   // [n_vocab] x [n_embd]
  const gguf::TensorInfo* output_norm = nullptr;  // [n_embd] f32
  const gguf::TensorInfo* output = nullptr;       // [n_vocab] x [n_embd]; token_embd where the file has no output
  std::vector<LayerTensors> layers;
  // gemma4
  const gguf::TensorInfo* rope_freqs = nullptr;      // [head_dim_k / 2] f32: the full layers' frequency divisors
  const gguf::TensorInfo* ple_table = nullptr;       // per_layer_token_embd [n_vocab] x [n_layer * n_embd_per_layer]
  const gguf::TensorInfo* ple_model_proj = nullptr;  // per_layer_model_proj [n_layer * n_embd_per_layer] x [n_embd]
  const gguf::TensorInfo* ple_proj_norm = nullptr;   // per_layer_proj_norm [n_embd_per_layer] f32

  // Tensors outside the blocks that every token reads besides the embeddings and the head (rope_freqs, the PLE
  // projection and its norm), in file order of the fields.
  std::vector<const gguf::TensorInfo*> globals() const;
};

// Finds every tensor the family needs and checks its shape and type; errors name the file and the tensor.
Result<ModelTensors> bind_tensors(const gguf::File& f, const ModelSpec& spec);

// One tensor for a binding: present, of the expected ggml shape (want[0] = row length; trailing 1s ignored) and of
// a type the kernels multiply (matmul) or f32; errors name the file, the tensor and the offset of its record.
Result<const gguf::TensorInfo*> bind_tensor(const gguf::File& f, const std::string& name, std::vector<uint64_t> want,
                                            bool matmul);
// The same where the tensor may be absent (nullptr then).
Result<const gguf::TensorInfo*> bind_optional(const gguf::File& f, const std::string& name,
                                              std::vector<uint64_t> want, bool matmul);

// Weight types the CPU kernels multiply: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K .. Q6_K, IQ4_XS.
bool matmul_type_supported(gguf::GgmlType t);
std::string matmul_type_names();  // the list above, for errors

// The views of one block's dense tensors (Mat.data == nullptr where the block has no such tensor). Routed experts
// are not here: they come from a tier, by id.
struct LayerWeights {
  Mat attn_norm, wq, wk, wv, wo, q_norm, k_norm, ffn_norm;
  Mat ffn_gate, ffn_up, ffn_down;
  Mat gate_inp;
  // gemma4, as LayerTensors
  Mat attn_post_norm, ffn_post_norm, out_scale, router_scale, ffn_pre_norm_2, ffn_post_norm_1, ffn_post_norm_2;
  Mat down_exps_scale, ple_gate, ple_proj, ple_post_norm;
  Mat ssm_qkv, ssm_z, ssm_conv, ssm_dt_bias, ssm_a, ssm_beta, ssm_alpha, ssm_norm, ssm_out;  // qwen35moe
  Mat gate_inp_shexp, gate_shexp, up_shexp, down_shexp;
};

// A block's dense tensor: its binding and its view.
struct LayerField {
  const gguf::TensorInfo* LayerTensors::*tensor;
  Mat LayerWeights::*mat;
};
// Every dense tensor field of a block (all but the routed experts), in the order LayerTensors declares them.
std::span<const LayerField> layer_fields();

// One routed expert: gate and up [n_ff_expert] x [n_embd], down [n_embd] x [n_ff_expert]. A fused gate_up tensor
// (gemma4) gives gate and up as its two halves.
struct ExpertWeights {
  Mat gate, up, down;
};

// Where the bytes of whole tensors come from -- the GGUF in place, or a store's data file, where a stacked expert
// tensor exists only as slices of its expert records -- for the weights a run keeps resident.
class TensorSource {
 public:
  struct Piece {
    const gguf::TensorInfo* tensor = nullptr;
    uint64_t offset = 0;  // into the tensor's bytes
    uint64_t length = 0;
    void* dst = nullptr;  // length bytes of host memory
  };
  virtual ~TensorSource() = default;
  // Reads every piece, many in flight; the first error (naming the file, offset and length) once all finished.
  virtual Status read(std::span<const Piece> pieces) = 0;
};

// A Mat over a tensor whose bytes start at data (as laid out in the file).
Mat mat_of(const gguf::TensorInfo& t, const uint8_t* data);

}  // namespace df::model
