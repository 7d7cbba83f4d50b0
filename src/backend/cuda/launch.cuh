// Launching kernels: the device's attributes the launch shapes depend on, launch_early() for the kernels of a
// decode step, which start while the kernel before them finishes (dev::wait_prior in common.cuh says the rule), and
// the kernels' view of kernels.h's argument types.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/common.cuh"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/cudart/check.h"
#include "diskformer/util/check.h"

namespace df::cuda {

inline int device_attribute(cudaDeviceAttr what) {
  int dev = 0, v = 0;
  DF_CUDA_CHECK(cudaGetDevice(&dev));
  DF_CUDA_CHECK(cudaDeviceGetAttribute(&v, what, dev));
  return v;
}

inline int sm_count() { return device_attribute(cudaDevAttrMultiProcessorCount); }

// Blocks of `threads` for n elements, a thread each.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t g = (n + threads - 1) / threads;
  DF_CHECK(g > 0 && g <= 0x7fffffff);
  return unsigned(g);
}

// kernels.h's InputGate as the kernels take it.
inline dev::Gate device_gate(const InputGate& g) {
  return {g.on ? (g.act == Glu::kGelu ? 2 : 1) : 0, g.mul, g.mul_stride};
}

// Whether kernels may launch early here: the device has programmatic dependent launch (compute capability 9.0 and
// later) and this build's code for it was compiled for 9.0 or later, so that dev::wait_prior() is not compiled out
// (a build for 8.x alone runs on a 9.0 GPU through its 8.x PTX: early launches would then race).
bool early_launch_supported();

// kernel<<<grid, block, smem, stream>>>(args...), allowed to start before the stream's previous kernel has finished
// where early_launch_supported() (elsewhere an ordinary launch). The kernel must call dev::wait_prior() before its
// first access to memory that another kernel writes or reads.
template <typename... Params, typename... Args>
void launch_early(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                  Args&&... args) {
  const bool can = early_launch_supported();
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = can ? 1 : 0;
  DF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace df::cuda
