// A model put on the GPU within a memory budget: the planner refuses a budget that cannot work before anything is
// uploaded; otherwise the resident part is uploaded, a session's buffers are measured, and what the budget has
// left goes to the expert cache. Memory is counted as the driver reports it (device memory in use, the CUDA
// context included), which is what --gpu-budget limits.
//
//   DF_ASSIGN(auto host, engine::Model::open(path, {.n_ctx = 1024, .host_allocator = &cuda::pinned_host_allocator()}));
//   DF_ASSIGN(cuda::GpuLoad g, cuda::load_gpu_model(*host, {.budget = 2ull << 30, .n_ctx = host->n_ctx()}));
//   DF_ASSIGN(auto s, cuda::GpuSession::create(*g.model, {.n_ctx = host->n_ctx()}));
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "diskformer/backend/cuda/gpu_forward.h"
#include "diskformer/engine/gpu_plan.h"
#include "diskformer/engine/model.h"

namespace df::cuda {

struct GpuLoadOptions {
  std::optional<uint64_t> budget;  // device memory in use at most; nullopt = every weight resident
  uint32_t n_ctx = 4096;           // the sessions' context and batch, as they will be created
  uint32_t max_batch = 512;
  // What sessions may allocate beyond the measured warm-up (CUDA graphs of later sessions); the warm-up has loaded
  // the kernels, cuBLAS and the streaming buffers already.
  uint64_t reserve = 16ull << 20;
};

struct GpuLoad {
  std::unique_ptr<GpuModel> model;
  engine::GpuPlan plan;         // the planner's figures, with the CUDA context as measured
  uint64_t used_resident = 0;   // device memory in use with the resident part and one session, before the cache
  uint32_t slots = 0;           // expert cache slots; 0 when every expert is resident
  std::string describe() const; // one line: residency, slots, slot size, share of experts on the GPU
};

// Device memory in use as the driver reports it (cudaMemGetInfo: total - free; every process's allocations and
// contexts, as nvidia-smi sums them).
uint64_t device_memory_used();

Result<GpuLoad> load_gpu_model(engine::Model& host, const GpuLoadOptions& options);

}  // namespace df::cuda
