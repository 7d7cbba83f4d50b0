// The forward pass on the GPU of a qwen35moe model (Qwen3.5 / Qwen3.6 MoE), top to bottom as the CPU's
// (backend/cpu/forward_qwen35.h says what each layer computes): per layer a Gated DeltaNet sublayer (projections,
// the causal convolution with its window, the q/k L2 norms, the gated delta rule with each v head's state, the gated
// RMSNorm, the output projection) or a gated attention sublayer (the query rows that carry each head's gate, q/k
// norms, NeoX RoPE on the first n_rot dims, attention over the f16 KV cache, the sigmoid gate), then the routed
// experts of experts.h (Forward's feed-forward sublayer) beside the shared expert under its sigmoid gate, which runs
// first.
//
// The recurrent state lives in Buf::rec_state (buffers.h: recurrent_state_bytes), advanced by every batch; a batch
// runs its tokens' delta rule in order inside one launch per layer, so the state after it does not depend on how
// the tokens were batched. save_after copies the state after that many tokens of the next batch into Buf::rec_save
// (the sequence's copies, session.h).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/forward.h"

namespace df::cuda {

class HybridForward final : public Forward {
 public:
  HybridForward(const GpuModel& m, std::vector<DeviceBuffer>& buf, const GpuSessionOptions& o);

  void run(int64_t n, bool all_logits, float* logits) override;
  // The next run's copy of the state after its first k tokens (0 < k < n), or none (0).
  void save_after(int64_t k) { save_after_ = k; }

 private:
  void delta_net(const GpuLayer& l, uint32_t slot, int64_t n);
  void gated_attention(const GpuLayer& l, uint32_t kv, int64_t n);
  // x += the shared expert's gated output for xn. xq: xn's Q8_0 blocks in scratch where the routed experts read
  // them after it (ExpertInput), which it leaves as they were.
  void shared_expert(const GpuLayer& l, int64_t n, uint8_t* xq);

  std::vector<uint32_t> slot_;  // [n_layer]: a DeltaNet layer's index into the state, an attention layer's KV layer
  int64_t save_after_ = 0;
};

}  // namespace df::cuda
