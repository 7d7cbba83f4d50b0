// The routed experts of one MoE layer on the GPU, behind one call, whatever their residency:
//   - resident: the fused two-launch path for a few tokens (gate and up with the SwiGLU and the Q8_0 of its output;
//     down with the weighted combine and the residual add), grouped by expert for batches (moe_plan on the device,
//     the router's ids never visit the host), or one (token, slot) per block column;
//   - streamed through the GPU tier: the router's choices come to the host (the one round trip of a layer),
//     model::schedule_moe cuts them into groups the tier holds at once, and each group runs the resident kernels with
//     the tier's slots in place of expert ids; the next layer's guessed experts are read ahead in both tiers;
//   - split (decode under a budget, of one sequence or several): the CPU computes, from RAM, the missed experts that
//     the schedule gives it, for every token routed to them, while the GPU copies and multiplies the rest; their
//     rows join the GPU's before the combine.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "diskformer/backend/cpu/experts.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/backend/cuda/session.h"
#include "diskformer/cudart/buffer.h"
#include "diskformer/io/buffer.h"
#include "diskformer/model/moe_schedule.h"

namespace df::cuda {

class RoutedExperts {
 public:
  // max_batch: the most tokens of one run (the host's copies of the router's choices are sized for it once, so that
  // a captured copy keeps its address).
  RoutedExperts(const GpuModel& m, std::vector<DeviceBuffer>& buf, bool grouped, uint32_t max_batch);
  ~RoutedExperts();
  RoutedExperts(const RoutedExperts&) = delete;
  RoutedExperts& operator=(const RoutedExperts&) = delete;

  // The next layer's experts as its router picks them from the residual x (decode with streamed experts, before this
  // layer's FFN overwrites xn): into Buf::guess, read by run(). Launches only where guessing(n).
  void guess(const GpuLayer& next, int64_t n);
  bool guessing(int64_t n) const { return n == 1 && m_.streamed && m_.streamed->prefetch; }
  // Streamed experts: layer il's router choices (and the guess, and for a decode step the normed rows and routing
  // weights) written into pinned host memory by one launch, where run() reads them after its one wait. Queues nothing
  // where the experts are resident. Only a launch, so that it can be captured with the layer's other work.
  void fetch(uint32_t il, int64_t n);
  // Where the experts stream: the stream's work so far ends with the next run()'s fetch (called after its segment,
  // outside any capture). run() then waits for that point alone, and what is queued between (the shared expert)
  // runs on the GPU while the host plans the experts. Without it, run() waits for the whole stream.
  void fetched();
  // Layer il, n tokens: the router's ids and weights are in Buf::ids / Buf::wts (and fetched, where the experts
  // stream), the normed input in Buf::xn (xq its Q8_0 blocks when fused: moe_decode_gate_up applies, and the fused
  // down launch where it takes the rows); adds the experts' weighted sum into the residual stream, or writes it to out
  // ([n][n_embd], not Buf::proj) where given.
  void run(const GpuLayer& l, uint32_t il, int64_t n, const uint8_t* xq, bool fused, float* out = nullptr);
  // The next runs step several sequences a token each (GpuSession::decode_many), not one sequence's tokens: like
  // one token, such a step may give the CPU a share of its missed experts (a prefill batch leaves them to the GPU).
  void set_many_sequences(bool many) { many_sequences_ = many; }
  // Whether a run of n tokens may give the CPU a share of its missed experts.
  bool splits(int64_t n) const { return m_.streamed && m_.streamed->cpu != nullptr && (n == 1 || many_sequences_); }
  // A streamed read failed during this pass (the rest of the pass is skipped); taken once.
  Status take_status() { return std::exchange(status_, Status{}); }
  uint64_t cpu_experts() const { return cpu_count_; }
  const ExpertHostTimes& host_times() const { return times_; }
  // Layer il's expert matrices as the kernels read them: slot s of the GPU tier's planes at data + s * stride when
  // they stream, the stacked tensors' expert 0 otherwise.
  model::ExpertWeights matrices(const GpuLayer& l, uint32_t il) const;

 private:
  template <typename T>
  T* at(Buf b) const { return buf_[size_t(b)].as<T>(); }
  void resident(const GpuLayer& l, int64_t n, const uint8_t* xq, bool fused, float* out);
  void ungrouped(const GpuLayer& l, int64_t n);
  void streamed(uint32_t il, int64_t n, const uint8_t* xq, bool fused, float* out);
  void fused_decode(uint32_t il, int64_t n, const uint8_t* xq, const int32_t* ids, int32_t* h, float* out);
  // The two-launch path's activations of n tokens' experts (gate and up at gate_stride / up_stride of the slots or
  // experts ids names): Q8_0 in Buf::up, and f32 in Buf::gate where the down projection needs them (decode_down).
  void decode_gate_up(const model::ExpertWeights& w, uint64_t gate_stride, uint64_t up_stride, int32_t n_expert,
                      const int32_t* ids, int64_t n, const uint8_t* xq);
  // Their down projections, weighted and summed: the fused launch where it stages the rows, else moe_matmul and
  // combine.
  void decode_down(const model::Mat& down, uint64_t stride, int32_t n_expert, const int32_t* ids, const float* weights,
                   int64_t n, float* out);
  // sum over k < n_used of weights[t][k] * rows ([n][n_used][n_embd], Buf::expert_out where null): written to out,
  // added into it (accumulate), or added into the residual stream (out null). One launch.
  void combine(const float* weights, int64_t n, int n_used, float* out, bool accumulate = false,
               const float* rows = nullptr);
  // The CPU's share of n tokens' experts: gate, up, the activation and down of each expert in schedule_.cpu from RAM,
  // for every token routed to it. The rows go to expert_out at their routing positions; or, with packed_weights, stay
  // in cpu_out_host_ packed [n][width] (each token's in routing order, zero rows after them), their routing weights
  // likewise into packed_weights ([n][width], pinned host): returns width. beside, where given, runs on this thread
  // while the pool's other threads start the products (cpu::expert_products), unless the experts cannot be read.
  int64_t cpu_share(uint32_t il, const int32_t* ids, int64_t n, float* packed_weights,
                    const std::function<void()>& beside = {});

  const GpuModel& m_;
  std::vector<DeviceBuffer>& buf_;
  bool grouped_;
  Glu glu_;  // the experts' gate activation
  Status status_;
  model::MoeSchedule schedule_;
  // Pinned, sized for max_batch tokens where the experts stream: the router's ids and the guess ([n * K + K]); where
  // the CPU shares, the normed rows ([n][n_embd]) and the routing weights ([n * K]).
  io::AlignedBuffer ids_host_, xn_host_, wts_host_;
  io::AlignedBuffer plan_host_, cpu_out_host_;  // pinned: per group, its plan; the CPU's rows
  std::vector<int64_t> pairs_;              // the CPU's (token, slot) pairs, expert by expert
  std::vector<float> cpu_in_, cpu_rows_;    // several tokens: each pair's input row, and its output row
  std::vector<int32_t> group_slots_;
  cpu::ExpertScratch cpu_scratch_;
  bool many_sequences_ = false;  // set_many_sequences
  model::CpuRate cpu_rate_;
  std::chrono::steady_clock::time_point cpu_done_{};  // when the CPU last finished a share
  uint32_t since_cpu_ = 0;     // decode layers with misses and no CPU share since the CPU last computed one
  // The CPU's last share found its threads asleep (cpu_rate_ learned nothing slower from it): the next layer with
  // misses gives it one expert, computed while the threads still spin, so that a warm sample follows every cold one.
  bool warm_sample_due_ = false;
  uint64_t cpu_count_ = 0;     // experts the CPU computed
  // Decode with reads ahead: the link's idle time in a layer's cycle (from one router round trip to the next, less
  // the seconds of the copies that layer queued), averaged over layers; the reads ahead take what fits in it.
  std::chrono::steady_clock::time_point round_trip_{};  // the last layer's, where it guessed
  double link_s_ = 0;
  double idle_link_s_ = 0;
  ExpertHostTimes times_;
  cudaEvent_t fetched_event_ = nullptr;  // fetched(), where the experts stream
  bool fetched_pending_ = false;
};

}  // namespace df::cuda
