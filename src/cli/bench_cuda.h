// bench --backend cuda: the model resident on the GPU (weights uploaded from the host model), prefill and greedy
// decode timed there. Without the CUDA backend in the build it reports that and returns 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diskformer/engine/model.h"

namespace df::cli {

struct BenchCudaArgs {
  std::string path;
  uint64_t model_bytes = 0;
  std::vector<int64_t> prompts, gens;  // every (p, n) pair is one configuration
  int64_t reps = 3;
  bool json = false, quiet = false;
};

int bench_cuda(engine::Model& host, const BenchCudaArgs& a);

}  // namespace df::cli
