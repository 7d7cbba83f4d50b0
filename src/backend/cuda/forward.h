// The forward pass on the GPU for the llama (dense and the Mixtral layout), qwen3 and qwen3moe families, top to
// bottom as the CPU's (backend/cpu/forward.cpp): embedding gather, per layer the attention sublayer (norm, q/k/v,
// qk-norm, RoPE, f16 KV store, attention, output) and the feed-forward sublayer (dense SwiGLU, or router and the
// routed experts of experts.h), each with its residual add; the final norm and the head.
//
// A decode step whose experts stream waits for the router's choices in every MoE layer, so one graph cannot hold it
// (the session captures the whole step where every expert is resident). Its work between two of those waits is a
// segment instead: the rest of one layer after its experts, the next layer up to its router's choices, fetched.
// With segments replayed, each is captured as a graph at the first step and replayed by the steps after, and the host
// issues one launch per layer where it issued some twenty; the experts' own work runs anew each step.
#pragma once

#include <initializer_list>
#include <span>
#include <memory>
#include <utility>
#include <vector>

#include "backend/cuda/experts.h"
#include "diskformer/backend/cuda/session.h"
#include "diskformer/cudart/graphs.h"

namespace df::cuda {

class Forward {
 public:
  Forward(const GpuModel& m, std::vector<DeviceBuffer>& buf, const GpuSessionOptions& o)
      : m_(m), buf_(buf), o_(o), experts_(m, buf, o.grouped_experts, o.max_batch) {}
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
  // Whether the next runs replay their segments from graphs (the comment at the top): for single-token steps at an
  // unknown first position (set_first_pos(-1)) in this session's cache, with all_logits off, of a model whose
  // experts stream. The graphs hold the buffers' addresses: drop_graphs() where one moves.
  void set_replay_segments(bool on) { replay_ = on; }
  void drop_graphs() { segments_.clear(); }

 protected:
  template <typename T>
  T* at(Buf b) const { return buf_[size_t(b)].as<T>(); }
  // The launches that segment `key` of a step issues: replayed from its graph where segments replay, else issued.
  template <class F>
  void segment(uint32_t key, F&& launches) {
    if (replay_) {
      segments_.run(m_.stream, key, launches);
    } else {
      launches();
    }
  }
  // Whether every product in ws takes Q8_0 activations of xn (norm_input then quantizes them).
  bool q8_inputs(std::span<const model::Mat* const> ws) const;
  // Whether product() of w for n tokens quantizes its input (gate applied) inside the decode launch's blocks, writing
  // nothing to scratch.
  static bool quantizes_in_blocks(const model::Mat& w, int64_t n);
  // Norms n rows of the residual stream at x into xn; when q8_inputs(ws), they are quantized in the same launch and
  // returned (in scratch, shared by those products), else nullptr.
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
  bool replay_ = false;     // set_replay_segments
  StreamGraphs segments_;   // by segment: layer il's is key il, the head's n_layer

  // How a layer's routed experts take their input, decided from the weights' types and n alone (so that a replayed
  // segment, which runs no host code, leaves the same decision): the fused two-launch path, and xn's Q8_0 blocks
  // where its launches wrote them.
  struct ExpertInput {
    uint8_t* xq = nullptr;  // written by the norm's launch
    bool fused = false;
  };
  ExpertInput expert_input(const GpuLayer& l, uint32_t il, int64_t n) const;
  // The llama families' sublayers (qwen35moe's feed-forward is qwen3moe's). ffn_block is the dense SwiGLU, or for
  // MoE everything before the routed experts: the next layer's guess, the norm, the router and its choices, fetched.
  // The experts are experts_.run(l, il, n, in.xq, in.fused) after it.
  void attention_block(const GpuLayer& l, uint32_t il, int64_t n);
  void ffn_block(const GpuLayer& l, uint32_t il, int64_t n, const ExpertInput& in);
};

}  // namespace df::cuda
