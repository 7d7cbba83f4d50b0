#include "diskformer/cudart/graphs.h"

#include "diskformer/cudart/check.h"

namespace df::cuda {

void StreamGraphs::clear() {
  for (cudaGraphExec_t e : execs_)
    if (e) cudaGraphExecDestroy(e);
  execs_.clear();
}

void StreamGraphs::begin(cudaStream_t s) {
  // Thread-local: other threads (a tier's readers, the CPU's pool) may use the runtime meanwhile.
  DF_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
}

void StreamGraphs::end(cudaStream_t s, size_t key) {
  cudaGraph_t g = nullptr;
  DF_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  if (key >= execs_.size()) execs_.resize(key + 1, nullptr);
  DF_CUDA_CHECK(cudaGraphInstantiate(&execs_[key], g, 0));
  DF_CUDA_CHECK(cudaGraphDestroy(g));
}

void StreamGraphs::launch(cudaStream_t s, size_t key) { DF_CUDA_CHECK(cudaGraphLaunch(execs_[key], s)); }

}  // namespace df::cuda
