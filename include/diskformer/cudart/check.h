// CUDA failures are bugs or a broken device, not user errors: they abort with the expression, the runtime's error
// string and file:line (DESIGN.md, two error channels). Allocation at load is the exception (buffer.h).
#pragma once

#include <cuda_runtime.h>

namespace df::cuda {
[[noreturn]] void cuda_fail(const char* expr, cudaError_t err, const char* file, int line);
}  // namespace df::cuda

#define DF_CUDA_CHECK(expr)                                                                    \
  do {                                                                                         \
    cudaError_t df_cuda_err_ = (expr);                                                         \
    if (df_cuda_err_ != cudaSuccess) ::df::cuda::cuda_fail(#expr, df_cuda_err_, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad configuration shows up here, a fault inside the kernel at the next synchronizing call.
#define DF_CUDA_CHECK_LAUNCH() DF_CUDA_CHECK(cudaGetLastError())
