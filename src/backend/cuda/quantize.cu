// Q8_0 quantization of activations on the GPU, bit for bit as cpu::Kernels::quantize_q8_0: d = amax / 127 stored as
// f16, q = round-half-even(x * (127 / amax)). A warp per block of 32, one element per lane.
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

__global__ void quantize_q8_0_kernel(const float* __restrict__ x, uint8_t* __restrict__ y, int64_t n_blocks,
                                     int64_t row_blocks, dev::Gate gate) {
  dev::allow_next();
  dev::wait_prior();
  const int64_t b = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (b >= n_blocks) return;  // whole warps leave together: n_blocks is per warp
  const float v = dev::gate_value(gate, x[b * dev::kQK + lane], b / row_blocks, (b % row_blocks) * dev::kQK + lane);
  const float amax = dev::warp_max(fabsf(v));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  uint8_t* yb = y + b * dev::kQ8Bytes;
  if (lane == 0) *reinterpret_cast<uint16_t*>(yb) = dev::f32_to_f16(d);
  yb[2 + lane] = uint8_t(int8_t(rintf(v * id)));
}

}  // namespace

void quantize_q8_0(const QuantizeQ8Args& a) {
  DF_CHECK(a.x != nullptr && a.y != nullptr);
  DF_CHECK(a.n_rows >= 0 && a.cols > 0 && a.cols % dev::kQK == 0);
  const int64_t n_blocks = a.n_rows * (a.cols / dev::kQK);
  if (n_blocks == 0) return;
  constexpr int kWarps = 8;
  const int64_t grid = (n_blocks + kWarps - 1) / kWarps;
  DF_CHECK(grid <= 0x7fffffff);
  launch_early(quantize_q8_0_kernel, dim3(unsigned(grid)), dim3(kWarps * 32), 0, a.stream, a.x, a.y, n_blocks,
               a.cols / dev::kQK, device_gate(a.gate));
}

}  // namespace df::cuda
