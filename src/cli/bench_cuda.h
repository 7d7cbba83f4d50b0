// bench --backend cuda: the model on the GPU (weights uploaded from the host model; with --gpu-budget the routed
// experts streamed through a GPU expert cache), prefill and greedy decode timed there. Without the CUDA backend in
// the build it reports that and returns 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "diskformer/engine/model.h"
#include "diskformer/io/buffer.h"

namespace df::cli {

struct BenchCudaArgs {
  std::string path;
  uint64_t model_bytes = 0;
  std::vector<int64_t> prompts, gens;  // every (p, n) pair is one configuration
  int64_t reps = 3;
  bool json = false, quiet = false;
  std::optional<uint64_t> gpu_budget, ram_budget;
  bool cpu_experts = false;  // streamed decode computes some missed experts on the CPU (--cpu-experts)
  uint32_t max_batch = 512;  // prompt tokens per forward pass (-b)
};

int bench_cuda(engine::Model& host, const BenchCudaArgs& a);

// Pinned host memory for the weights of a CUDA run (copies to the GPU at the link's speed); nullptr in a build
// without CUDA.
io::HostAllocator* cuda_host_allocator();

}  // namespace df::cli
