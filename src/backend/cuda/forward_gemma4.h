// The forward pass on the GPU for gemma4, top to bottom as the CPU's (backend/cpu/forward_gemma4.cpp): the embedding
// scaled by sqrt(n_embd) and, in the E2B layout, the per-layer inputs; per layer the attention sublayer (its own head
// size, KV heads, RoPE and window; q/k norms with weights, v normed without; a layer past the first shared one reads
// an earlier layer's cache), normed after as well as before, and the feed-forward sublayer: the dense GeGLU MLP and,
// in the 26B-A4B layout, the routed experts beside it (their own router input and input norm, each output scaled),
// each normed, summed and normed again; the per-layer input block; the layer's output scale; the final norm, the head
// and the soft cap.
#pragma once

#include "backend/cuda/forward.h"

namespace df::cuda {

class Gemma4Forward final : public Forward {
 public:
  Gemma4Forward(const GpuModel& m, std::vector<DeviceBuffer>& buf, const GpuSessionOptions& o)
      : Forward(m, buf, o), kv_(kv_layout(m.spec, o.n_ctx)) {}
  void run(int64_t n, bool all_logits, float* logits) override;

 private:
  static bool moe(const GpuLayer& l) { return l.gate_inp.data != nullptr; }
  // expert_input's decision for gemma4: the two-launch path only on the norm's Q8_0 blocks.
  ExpertInput moe_input(const GpuLayer& l, uint32_t il, int64_t n) const;
  void per_layer_inputs(int64_t n);
  void attention(const GpuLayer& l, uint32_t il, int64_t n);
  // The dense MLP (normed and added where the layer has no experts), and in a MoE layer everything before the
  // routed experts: the guess, the router and its choices (fetched), the experts' norm. layer_end finishes the layer
  // after them: the feed-forward's post-norms (MoE) and the per-layer input block.
  void ffn(const GpuLayer& l, uint32_t il, int64_t n, const ExpertInput& in);
  void layer_end(const GpuLayer& l, uint32_t il, int64_t n);
  void ple_block(const GpuLayer& l, uint32_t il, int64_t n);
  // x += norm(y) * weight for n rows of n_embd (a sublayer's post-norm and residual add), the sums then times
  // *then_scale where set (the layer's output scale, with its last add).
  void add_normed(const float* y, const model::Mat& weight, int64_t n, const float* then_scale);

  KvLayout kv_;  // layers' cache offsets (shared layers at their source's)
};

}  // namespace df::cuda
