// The forward pass on the GPU for the llama (dense and the Mixtral layout), qwen3 and qwen3moe families, top to
// bottom as the CPU's (backend/cpu/forward.cpp): embedding gather, per layer the attention sublayer (norm, q/k/v,
// qk-norm, RoPE, f16 KV store, attention, output) and the feed-forward sublayer (dense SwiGLU, or router and the
// routed experts of experts.h), each with its residual add; the final norm and the head.
#pragma once

#include <initializer_list>
#include <span>
#include <memory>
#include <utility>
#include <vector>

#include "backend/cuda/experts.h"
#include "diskformer/backend/cuda/session.h"

namespace df::cuda {

class Forward {
 public:
  Forward(const GpuModel& m, std::vector<DeviceBuffer>& buf, const GpuSessionOptions& o)
      : m_(m), buf_(buf), o_(o), experts_(m, buf, o.grouped_experts) {}
  virtual ~Forward() = default;

  // One batch of n <= max_batch tokens whose ids and positions are in Buf::tok / Buf::pos; the logits of the last
  // token, or of all n, into `logits`. A family whose layers differ overrides it (forward_qwen35.h).
  virtual void run(int64_t n, bool all_logits, float* logits);
  RoutedExperts& experts() { return experts_; }
  // The position of the next run's first token, where the host knows it (not inside a captured decode step, which
  // replays at any position): a launch may then depend on it.
  void set_first_pos(int64_t pos) { first_pos_ = pos; }
  // Where each token's keys and values go and attention reads them: token i of the next run in caches[i] (another
  // session's), one token per sequence (GpuSession::decode_many); empty: every token in this session's cache.
  struct KvCaches {
    uint16_t* k = nullptr;
    uint16_t* v = nullptr;
  };
  void set_token_caches(std::vector<KvCaches> caches) {
    token_caches_ = std::move(caches);
    experts_.set_many_sequences(!token_caches_.empty());
  }

 protected:
  template <typename T>
  T* at(Buf b) const { return buf_[size_t(b)].as<T>(); }
  // Norms n rows of the residual stream at x into xn; when every product in ws takes Q8_0 activations of xn, they
  // are quantized in the same launch and returned (in scratch, shared by those products), else nullptr.
  const uint8_t* norm_input(const float* x, const float* weight, int64_t n, std::span<const model::Mat* const> ws);
  // The products of xn with up to 3 matrices: one decode_matvec launch for a few tokens when xq holds xn's Q8_0
  // blocks and the kernel takes every matrix, else a matmul each (the same results).
  void products(int64_t n, const uint8_t* xq, std::initializer_list<std::pair<const model::Mat*, float*>> outs);
  // The products of n rows of the residual stream at x, normed by `norm`, with up to 3 matrices: for a few tokens
  // one decode_matvec launch per weight type whose blocks norm x themselves where it takes every matrix, else
  // norm_input, then products (the same results).
  void normed_products(const float* x, const float* norm, int64_t n,
                       std::initializer_list<std::pair<const model::Mat*, float*>> outs);
  // x += W in (for a few tokens one launch that adds in its epilogue).
  void add_product(const model::Mat& w, const float* in, int64_t n, const uint8_t* in_q8 = nullptr);
  // y = W act(in), or y += that (accumulate), n rows [n][w.rows]; the gate only where decode_matvec takes w.
  // in_q8: in's Q8_0 blocks where its producer wrote them (no gate then), used where decode_matvec takes w.
  void product(const model::Mat& w, const float* in, int64_t n, float* y, bool accumulate = false,
               const InputGate& gate = {}, const uint8_t* in_q8 = nullptr);
  // The same with the gate applied in any case: inside the product's launch where it can, else in place in `in`
  // first (its own launch).
  void gated_product(const model::Mat& w, float* in, const InputGate& gate, int64_t n, float* y,
                     bool accumulate = false);

  const GpuModel& m_;
  std::vector<DeviceBuffer>& buf_;
  const GpuSessionOptions& o_;
  RoutedExperts experts_;
  int64_t first_pos_ = -1;  // -1: unknown
  std::vector<KvCaches> token_caches_;

  // The llama families' sublayers (qwen35moe's feed-forward is qwen3moe's).
  void attention_block(const GpuLayer& l, uint32_t il, int64_t n);
  void ffn_block(const GpuLayer& l, uint32_t il, int64_t n);
};

}  // namespace df::cuda
