// Token selection kernels: the parts of sampling::Sampler whose work grows with the vocabulary, on the GPU. The host
// finishes with Sampler::sample_top_k on the few survivors (cuda/device_sampler.h). C++17 (included by .cu files).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace df::cuda {

// out = x, except out[ids[i]] = x > 0 ? x / penalty : x * penalty (the CPU sampler's repeat penalty, IEEE division
// and product, so the values are bit-identical). ids are distinct and each < n (the caller deduplicates).
struct RepeatPenaltyArgs {
  const float* x = nullptr;      // [n]
  float* out = nullptr;          // [n]; must not alias x
  const int32_t* ids = nullptr;  // [n_ids] (device)
  int64_t n = 0, n_ids = 0;
  float penalty = 1.0f;
  cudaStream_t stream = nullptr;
};
void repeat_penalty(const RepeatPenaltyArgs& a);

// x[ids[i]] = -inf in place: the CPU sampler's banned tokens (llama.cpp's logit bias for --ignore-eos), so that
// neither argmax nor top-k can choose them. ids are each < n; repeats are harmless.
struct BanArgs {
  float* x = nullptr;            // [n]
  const int32_t* ids = nullptr;  // [n_ids] (device)
  int64_t n = 0, n_ids = 0;
  cudaStream_t stream = nullptr;
};
void ban_tokens(const BanArgs& a);

// The k best entries of x [n] under (higher value, then lower index) — the set the CPU sampler's partial_sort keeps,
// ties at the cut resolved toward the lower index — written as (value, index) pairs in no particular order.
// -0.0 ranks equal to +0.0 (as float comparison has it); NaN ranks below every number. A radix select over
// order-preserving keys, 4 passes of 8 bits, each counted by blocks over the whole row into a histogram that one
// thread reads; then a pass that gathers the winners, and where a tie straddles the k-th place, one block that takes
// the tied keys in index order.
struct TopKArgs {
  const float* x = nullptr;     // [n]
  int64_t n = 0;
  int32_t k = 0;                // 1 <= k <= n
  float* values = nullptr;      // [k] out
  int32_t* ids = nullptr;       // [k] out
  void* work = nullptr;         // [top_k_work_bytes()] device scratch; one selection at a time
  cudaStream_t stream = nullptr;
};
uint64_t top_k_work_bytes();
void top_k(const TopKArgs& a);

}  // namespace df::cuda
