// A model with every weight resident in GPU memory, and sessions that run the forward pass on the GPU for the
// llama (dense and the Mixtral layout), qwen3 and qwen3moe families: the same ModelSpec, tensor binding and
// arithmetic as the CPU engine (model/forward.cpp), calling the kernels of kernels.h.
//
//   DF_ASSIGN(auto host, engine::Model::open(path, {.n_ctx = 4096}));   // spec, bindings, weights via the io layer
//   DF_ASSIGN(auto gpu, cuda::GpuModel::upload(host->spec(), host->weights()));
//   DF_ASSIGN(auto s, cuda::GpuSession::create(*gpu, {.n_ctx = host->n_ctx()}));
//   DF_TRY(s->eval(prompt_ids));
//   int32_t next = s->argmax();               // greedy, on the GPU
//   std::span<const float> l = s->logits();   // or the logits, copied back
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cuda/buffer.h"
#include "diskformer/backend/cuda/expert_cache.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/io/buffer.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/util/result.h"

namespace df::cuda {

// One tensor in device memory: the owner of the bytes and the matrix view the kernels read.
struct DTensor {
  DeviceBuffer buf;
  DMat m;
  const float* f32() const { return reinterpret_cast<const float*>(m.data); }
  bool present() const { return m.data != nullptr; }
};

struct GpuLayer {
  DTensor attn_norm, wq, wk, wv, wo, q_norm, k_norm, ffn_norm;  // shapes as model::LayerWeights
  DTensor ffn_gate, ffn_up, ffn_down;                           // dense layers
  DTensor gate_inp;                                             // router [n_expert] x [n_embd]
  // Routed experts stacked as in the file: m describes expert 0 ([n_ff_expert] x [n_embd], down [n_embd] x
  // [n_ff_expert]); expert e starts at m.data + e * expert_stride.
  DTensor gate_exps, up_exps, down_exps;
  uint64_t gate_stride = 0, up_stride = 0, down_stride = 0;
};

struct GpuUploadOptions {
  // MoE models: leave the routed experts in `weights` (host RAM, or the disk tier below it) and stream them through
  // a GPU expert cache that stream_experts() then creates. Without it every expert is uploaded.
  bool stream_experts = false;
  // Read token embedding rows from the source's memory where the GPU can reach it (pinned host RAM) instead of
  // uploading the table; ignored when the output head is tied to it or the memory is not device-accessible.
  bool token_embd_on_host = false;
  // Resident weights packed into one allocation of this many bytes (each tensor 256-byte aligned), sparing the
  // driver's per-allocation rounding; tensors that do not fit get their own. 0: one allocation per tensor.
  uint64_t arena_bytes = 0;
};

class GpuModel {
 public:
  // Copies every weight that `weights` hands out (dense tensors per layer, all experts of every MoE layer, in chunks
  // of max_experts_per_call) to the current device. Errors: a weight type the kernels do not multiply, a tensor
  // whose shape disagrees with the spec, not enough GPU memory (with the sizes). With stream_experts, `weights`
  // must outlive the model (the cache reads experts from it).
  static Result<std::unique_ptr<GpuModel>> upload(const model::ModelSpec& spec, model::WeightSource& weights,
                                                  const GpuUploadOptions& options = {});
  // Creates the expert cache of an upload with stream_experts: `slots` (layer, expert) records in GPU memory,
  // replacing any earlier one (no session may be running).
  Status stream_experts(uint32_t slots);
  // Uploaded with stream_experts: sessions allocate the streaming buffers up front (so a budget counts them).
  bool streams_experts() const { return streams_experts_; }
  // The cache of streamed experts; nullptr when every expert is resident.
  GpuExpertCache* expert_cache() const { return expert_cache_.get(); }
  // Device bytes of one expert cache slot, for sizing the cache against a budget.
  Result<uint64_t> expert_slot_bytes() const;

  const model::ModelSpec& spec() const { return spec_; }
  uint64_t device_bytes() const { return bytes_; }
  const DMat& token_embd() const { return token_embd_.m; }
  const DMat& output() const { return output_shared_ ? token_embd_.m : output_.m; }
  const float* output_norm() const { return output_norm_.f32(); }
  const GpuLayer& layer(uint32_t il) const { return layers_[il]; }

 private:
  GpuModel() = default;
  Result<DTensor> put(const model::Mat& m, const std::string& what);
  DeviceBuffer arena_;      // resident weights packed (GpuUploadOptions::arena_bytes)
  uint64_t arena_used_ = 0;

  model::ModelSpec spec_;
  DTensor token_embd_, output_norm_, output_;
  bool output_shared_ = false;  // tied embeddings: output() reads token_embd
  std::vector<GpuLayer> layers_;
  uint64_t bytes_ = 0;
  model::WeightSource* source_ = nullptr;  // kept for the expert cache (stream_experts)
  bool streams_experts_ = false;
  std::unique_ptr<GpuExpertCache> expert_cache_;
};

struct GpuSessionOptions {
  uint32_t n_ctx = 4096;      // KV cache positions
  uint32_t max_batch = 512;   // tokens per forward pass; longer evals are split
  bool decode_graph = true;  // replay single-token steps from a captured CUDA graph
  // Batches of several tokens multiply the routed experts grouped by expert (moe_matmul_grouped: each expert's
  // weights read once per 8 of its tokens) instead of once per (token, slot).
  bool grouped_experts = true;
  // Streamed experts, one token at a time: experts missing from the GPU cache may be computed here, on the CPU from
  // host RAM, while the others are copied to the GPU -- as many as the measured rates of the two say finish first.
  // Only for sources whose expert views stay valid (max_experts_per_call() == 0: every expert in RAM).
  cpu::Context* cpu_experts = nullptr;
};

// One sequence on the GPU: its KV cache (f16, [n_layer][n_ctx][kv_dim]), work buffers, a stream of its own.
class GpuSession {
 public:
  static Result<std::unique_ptr<GpuSession>> create(const GpuModel& model, const GpuSessionOptions& options = {});
  ~GpuSession();
  GpuSession(const GpuSession&) = delete;
  GpuSession& operator=(const GpuSession&) = delete;

  // Runs tokens after the n_past() cached positions (in batches of max_batch). all_logits keeps the logits of every
  // token of this call ([n][n_vocab] in logits()), otherwise only the last token's. Errors: context overflow, a
  // token outside the vocabulary (nothing is run then).
  Status eval(std::span<const int32_t> tokens, bool all_logits = false);
  // The logits of the last eval, copied from the device on first use.
  std::span<const float> logits();
  // Greedy choice for the last evaluated token, computed on the device (the first maximum, as the CPU sampler).
  int32_t argmax();
  // The last evaluated token's logits on the device, [n_vocab], until the next eval; work queued on stream() after
  // the eval reads them in order (token selection: device_sampler.h).
  const float* last_logits_device() const;
  cudaStream_t stream() const { return stream_; }

  uint32_t n_past() const { return n_past_; }
  uint32_t n_ctx() const { return opt_.n_ctx; }
  // GPU memory this session holds: KV cache, RoPE table and work buffers (the weights are the model's).
  uint64_t device_bytes() const;
  // Streamed experts the CPU computed instead of the GPU (GpuSessionOptions::cpu_experts).
  uint64_t cpu_experts_computed() const { return cpu_expert_count_; }
  // Forgets positions from n_keep on (their cache entries are overwritten by the next eval).
  void truncate(uint32_t n_keep);

 private:
  GpuSession(const GpuModel& m, const GpuSessionOptions& o) : model_(m), opt_(o) {}
  Status allocate();
  // One batch of n <= max_batch tokens whose ids and positions are already in tok_/pos_; logits of the last token or
  // of all n into `logits`.
  void forward(int64_t n, bool all_logits, float* logits);
  void attention_block(const GpuLayer& l, uint32_t il, int64_t n);
  void ffn_block(const GpuLayer& l, uint32_t il, int64_t n);
  void moe_ungrouped(const GpuLayer& l, int64_t n);
  // The routed experts of layer il through the model's expert cache (gpu_session_stream.cpp): xq holds xn's Q8_0
  // blocks when `fused` (the two-launch decode path applies); adds the experts' output into x.
  void moe_streamed(GpuExpertCache& cache, uint32_t il, int64_t n, const uint8_t* xq, bool fused);
  // Streamed decode's CPU share (opt_.cpu_experts): which missed experts, and computing them.
  void take_cpu_share(GpuExpertCache& cache, uint32_t il);
  void cpu_share(uint32_t il, const int32_t* ids, int K, bool packed);
  void fused_decode(GpuExpertCache& cache, uint32_t il, int64_t n, const uint8_t* xq, const int32_t* ids, int32_t* h);
  const uint8_t* norm_input(const float* x, const float* weight, int64_t n, std::initializer_list<const DMat*> ws);
  void products(int64_t n, const uint8_t* xq, std::initializer_list<std::pair<const DMat*, float*>> outs);
  void add_product(const DMat& w, const float* in, int64_t n);
  void decode_step_graph();

  const GpuModel& model_;
  GpuSessionOptions opt_;
  cudaStream_t stream_ = nullptr;
  uint32_t n_past_ = 0;

  DeviceBuffer k_cache_, v_cache_;  // [n_layer][n_ctx][kv_dim_k or kv_dim_v] f16
  DeviceBuffer rope_table_;         // [n_ctx][n_rot / 2][cos, sin]
  DeviceBuffer tok_, pos_;          // [max_batch] int32
  DeviceBuffer x_, xn_, q_, k_, v_, attn_, proj_;  // activations, [max_batch][...]
  DeviceBuffer gate_, up_;          // [max_batch][max(n_ff, n_expert_used * n_ff_expert)]
  DeviceBuffer router_, ids_, wts_, expert_out_;
  DeviceBuffer order_, tiles_, gathered_;  // grouped experts: moe_plan's output, inputs in plan order
  DeviceBuffer scratch_;            // Q8_0 activations of the current product
  DeviceBuffer attn_work_;          // attention_work_bytes: the split attention's partial results
  DeviceBuffer logits_dev_;         // [rows][n_vocab]
  DeviceBuffer next_;               // [1] int32: argmax result
  uint64_t logits_rows_cap_ = 0;

  std::vector<float> logits_host_;
  uint64_t logits_rows_ = 0;  // rows the last eval produced
  bool logits_fresh_ = false;  // logits_host_ holds them

  cudaGraphExec_t graph_ = nullptr;  // the captured single-token step (decode_graph)
  std::vector<int32_t> staging_;     // host ids and positions of one batch

  // Streamed experts (allocated on first use): a failed read stops the pass and eval returns it.
  Status stream_status_;
  io::AlignedBuffer ids_host_, plan_host_;  // pinned: the router's ids; per group, slot map, order and tiles
  DeviceBuffer plan_dev_;                   // one group's slot map, order and tiles
  DeviceBuffer act_;                        // [n * n_used][n_ff_expert] SwiGLU outputs
  DeviceBuffer xq_stream_;                  // xn's Q8_0 blocks, read by every group's gate and up
  std::vector<int32_t> where_, distinct_, group_slots_;
  std::vector<int64_t> first_, fill_;
  io::AlignedBuffer xn_host_, wts_host_, cpu_out_host_;  // pinned: normed row, routing weights, the CPU's rows
  std::vector<float> cpu_gate_, cpu_up_;
  std::vector<int32_t> cpu_ids_;
  double cpu_s_per_byte_ = 1.0 / 20e9;  // measured: the CPU's time per expert byte (starts at a guess)
  uint64_t cpu_expert_count_ = 0;       // experts the CPU computed
};

}  // namespace df::cuda
