// cuBLAS for the float products of batches, behind one process-wide handle per device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace df::cuda::blas {

// y[t][r] = dot(W row r, x[t]) for t < n_tok in f32 (products and sums in f32, no TF32): W is rows x cols with
// ld_w floats between rows, x is [n_tok][cols], y is [n_tok][rows].
struct SgemmRowsArgs {
  const float* w = nullptr;
  int64_t rows = 0, cols = 0, ld_w = 0;
  const float* x = nullptr;
  int64_t n_tok = 0;
  float* y = nullptr;
  cudaStream_t stream = nullptr;
};
// Enqueues the product and returns true; false (nothing enqueued) when the stream is being captured into a graph
// and this device's handle does not exist yet (creating it there is not allowed), or the shape exceeds cuBLAS's
// 32-bit dimensions. The caller then runs its own kernel.
bool sgemm_rows(const SgemmRowsArgs& a);

// y[t][r] = dot(W row r, x[t]) for t < n_tok with f16 W and x, f32 products' sums on the tensor cores: W is rows x
// cols with ld_w halves between rows, x is [n_tok][cols] halves, y is [n_tok][ld_y] floats (a block of rows of a
// wider output: y points at its first row). Returns false as sgemm_rows does.
struct HgemmRowsArgs {
  const uint16_t* w = nullptr;
  int64_t rows = 0, cols = 0, ld_w = 0;
  const uint16_t* x = nullptr;
  int64_t n_tok = 0;
  float* y = nullptr;
  int64_t ld_y = 0;
  cudaStream_t stream = nullptr;
};
bool hgemm_rows(const HgemmRowsArgs& a);
// Whether hgemm_rows would enqueue on this stream now (a handle exists, or the stream is not being captured).
bool available(cudaStream_t stream);

}  // namespace df::cuda::blas
