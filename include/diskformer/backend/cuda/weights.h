// A model's resident weights in GPU memory: every dense tensor (token embeddings, output head, attention, norms,
// routers, dense FFNs) and, where every expert is resident, the stacked expert tensors -- read from a
// model::TensorSource (the GGUF in place or a store) through pinned staging buffers and copied up, so the whole
// model never sits in RAM on the way.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "diskformer/cudart/buffer.h"
#include "diskformer/io/buffer.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/util/result.h"

namespace df::cuda {

// One layer's tensors in device memory (Mat.data null where the layer has none); shapes as model::LayerWeights.
struct GpuLayer {
  model::Mat attn_norm, wq, wk, wv, wo, q_norm, k_norm, ffn_norm;
  model::Mat ffn_gate, ffn_up, ffn_down;  // dense layers
  model::Mat gate_inp;                    // router [n_expert] x [n_embd]
  // Routed experts stacked as in the file, where they are resident: m describes expert 0 ([n_ff_expert] x [n_embd],
  // down [n_embd] x [n_ff_expert]); expert e starts at data + e * stride.
  model::Mat gate_exps, up_exps, down_exps;
  uint64_t gate_stride = 0, up_stride = 0, down_stride = 0;
  // gemma4, as model::LayerWeights (a fused gate_up tensor gives gate_exps and up_exps as its halves)
  model::Mat attn_post_norm, ffn_post_norm, out_scale, router_scale, ffn_pre_norm_2, ffn_post_norm_1,
      ffn_post_norm_2, down_exps_scale, ple_gate, ple_proj, ple_post_norm;
  // qwen35moe (model::LayerWeights' fields): a DeltaNet layer's projections, convolution and gates; the shared expert.
  model::Mat ssm_qkv, ssm_z, ssm_conv, ssm_dt_bias, ssm_a, ssm_beta, ssm_alpha, ssm_norm, ssm_out;
  model::Mat gate_inp_shexp, gate_shexp, up_shexp, down_shexp;
};

struct UploadOptions {
  bool experts = true;  // every routed expert (false: they stream through a GPU tier)
  // Token embedding rows read by the GPU from pinned host RAM instead of device memory (an untied head only: a tied
  // one reads every row every token).
  bool token_embd_on_host = false;
  // gemma4's per-layer embedding table not uploaded: its rows stream through a GPU row cache (device_rows.h), and
  // ple_table() keeps its shape and type without data.
  bool ple_table_streamed = false;
  uint64_t staging_bytes = 64ull << 20;  // pinned RAM the copies go through, in two halves
};

class GpuWeights {
 public:
  // Errors, before anything is read: a weight type without CUDA kernels or a norm that is not F32 (naming the
  // tensor). Then: a failed read, not enough GPU memory (with the sizes).
  static Result<std::unique_ptr<GpuWeights>> upload(const model::ModelSpec& spec, const model::ModelTensors& tensors,
                                                    model::TensorSource& source, const UploadOptions& options = {});

  const model::Mat& token_embd() const { return token_embd_; }
  const model::Mat& output() const { return output_; }  // token_embd's bytes when tied
  const float* output_norm() const { return output_norm_.f32(); }
  // gemma4: the per-layer embedding table (no data where its rows stream), its projection and norm; the full
  // layers' RoPE frequency divisors on the device and on the host (for the RoPE table).
  const model::Mat& ple_table() const { return ple_table_; }
  const model::Mat& ple_model_proj() const { return ple_model_proj_; }
  const float* ple_proj_norm() const { return ple_proj_norm_.f32(); }
  const std::vector<float>& rope_freqs() const { return rope_freqs_host_; }
  const GpuLayer& layer(uint32_t il) const { return layers_[il]; }
  bool experts_resident() const { return experts_resident_; }
  uint64_t device_bytes() const { return device_bytes_; }  // tensor bytes on the device
  uint64_t host_bytes() const { return host_.size(); }     // tables kept in pinned RAM
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  GpuWeights() = default;
  DeviceBuffer arena_;  // every device tensor, 256-byte aligned
  io::AlignedBuffer host_;
  model::Mat token_embd_, output_norm_, output_;
  model::Mat ple_table_, ple_model_proj_, ple_proj_norm_, rope_freqs_;
  std::vector<float> rope_freqs_host_;
  std::vector<GpuLayer> layers_;
  bool experts_resident_ = false;
  uint64_t device_bytes_ = 0, bytes_read_ = 0;
};

}  // namespace df::cuda
