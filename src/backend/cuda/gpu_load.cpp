#include "diskformer/backend/cuda/gpu_load.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "diskformer/util/check.h"
#include "diskformer/util/size.h"

namespace df::cuda {

uint64_t device_memory_used() {
  size_t free_b = 0, total_b = 0;
  DF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return uint64_t(total_b - free_b);
}

std::string GpuLoad::describe() const {
  if (slots == 0) return "all weights resident on the GPU";
  const model::ModelSpec& s = model->spec();
  const uint64_t n = uint64_t(s.n_layer) * s.n_expert;
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * slots / double(n));
  return "experts streamed through " + std::to_string(slots) + " GPU slots of " +
         format_size(model->expert_cache()->slot_bytes()) + " (" + pct + " of " + std::to_string(n) +
         " experts), resident part " + format_size(used_resident) + " in use";
}

Result<GpuLoad> load_gpu_model(engine::Model& host, const GpuLoadOptions& o) {
  const model::ModelSpec& spec = host.spec();
  DF_CUDA_CHECK(cudaFree(nullptr));  // creates the context, so that it is counted below
  GpuLoad g;
  DF_ASSIGN(g.plan, engine::plan_gpu(spec, host.tensors(),
                                     {.budget = o.budget, .n_ctx = o.n_ctx, .max_batch = o.max_batch,
                                      .context_bytes = device_memory_used()}));
  const bool stream = g.plan.mode == engine::Residency::kStreamExperts;
  DF_ASSIGN(g.model, GpuModel::upload(spec, host.weights(),
                                      {.stream_experts = stream,
                                       .token_embd_on_host = g.plan.token_embd_on_host,
                                       .arena_bytes = g.plan.resident.weights()}));
  if (!stream) return g;
  // Measured with everything a run loads: kernel modules load on their first launch and cuBLAS allocates its
  // workspace on first use, so a probe session runs a short batch and a decode step through the fewest slots.
  DF_TRY(g.model->stream_experts(g.plan.min_slots));
  {
    DF_ASSIGN(auto probe, GpuSession::create(*g.model, {.n_ctx = o.n_ctx, .max_batch = o.max_batch}));
    const std::vector<int32_t> warm(std::max<uint32_t>(1, std::min({64u, o.max_batch, o.n_ctx - 1})), 1);
    DF_TRY(probe->eval(warm));
    if (o.n_ctx > warm.size()) DF_TRY(probe->eval(std::span<const int32_t>(warm.data(), 1)));
    g.used_resident = device_memory_used() - g.model->expert_cache()->device_bytes();
  }
  DF_ASSIGN(const uint64_t slot, g.model->expert_slot_bytes());
  const uint64_t budget = *o.budget;
  const uint64_t need_min = g.used_resident + o.reserve + uint64_t(g.plan.min_slots) * slot;
  if (budget < need_min)
    return Error{"--gpu-budget " + format_size(budget) + " is too small: the resident part (weights " +
                 format_size(g.model->device_bytes()) + ", a session's KV cache and buffers, the CUDA context) has " +
                 format_size(g.used_resident) + " of device memory in use, " + format_size(o.reserve) +
                 " is kept for buffers sessions allocate later, and streaming needs at least " +
                 std::to_string(g.plan.min_slots) + " expert slots of " + format_size(slot) + ": at least " +
                 format_size(need_min)};
  const uint64_t n_records = uint64_t(spec.n_layer) * spec.n_expert;
  g.slots = uint32_t(std::min<uint64_t>((budget - g.used_resident - o.reserve) / slot, n_records));
  DF_TRY(g.model->stream_experts(g.slots));
  return g;
}

}  // namespace df::cuda
