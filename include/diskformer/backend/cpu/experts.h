// Routed experts on the CPU: each expert runs once over the rows routed to it, the gate and up products of every
// expert of a request as one parallel job and their down products as another, so that small matrices do not each
// pay for waking the pool. Each expert takes its rows one at a time in llama.cpp's one-row orders, as its
// mul_mat_id does. The CPU forward's MoE layers and a GPU run's CPU share of decode both compute with it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "diskformer/backend/cpu/ops.h"
#include "diskformer/model/weights.h"

namespace df::cpu {

struct ExpertScratch {
  WorkBuffer<float> gate, up;  // [rows][n_ff_expert]
};

// How an expert combines its gate and up products: silu(gate) * up (SwiGLU), or gelu(gate) * up (GEGLU, gemma4).
enum class GateActivation { kSwiGlu, kGeGlu };

// in: [rows][n_embd] inputs grouped by expert: expert i's rows are [first[i], first[i + 1]) (first has
// ew.size() + 1 entries); out: [rows][n_embd], each row its expert's gated FFN of the input row. With shared_in,
// every expert takes the same m = first[i + 1] - first[i] rows in[0 .. m) (one token's experts in decode): its
// activations are converted once for all of them. cuda_order: the products as MatmulJob::cuda_order takes them (a GPU
// run's CPU share). beside, where given, runs once on the calling thread while the pool's other threads start the gate
// and up products (a GPU run's CUDA calls for its own share of the experts).
void expert_products(Context& ctx, std::span<const model::ExpertWeights> ew, std::span<const int64_t> first,
                     const float* in, float* out, ExpertScratch& scratch,
                     GateActivation act = GateActivation::kSwiGlu, bool shared_in = false, bool cuda_order = false,
                     const std::function<void()>& beside = {});

}  // namespace df::cpu
