#include <cuda_runtime.h>

#include "diskformer/cudart/devices.h"

#include "diskformer/cudart/check.h"

namespace df::cuda {

DeviceInfo query_devices() {
  DeviceInfo info;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    info.why_none = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device";
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return info;
  }
  info.count = n;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    info.name = prop.name;
    info.sm_major = prop.major;
    info.sm_minor = prop.minor;
    info.total_bytes = prop.totalGlobalMem;
  }
  return info;
}

uint64_t device_memory_used() {
  size_t free_b = 0, total_b = 0;
  DF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return uint64_t(total_b - free_b);
}

namespace {
__global__ void add_one_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
}  // namespace

bool selftest_add_one(float* host_values, int n, std::string* why) {
  float* dev = nullptr;
  auto fail = [&](cudaError_t e) {
    if (why) *why = cudaGetErrorString(e);
    if (dev) cudaFree(dev);
    return false;
  };
  cudaError_t e = cudaMalloc(&dev, sizeof(float) * n);
  if (e != cudaSuccess) return fail(e);
  if ((e = cudaMemcpy(dev, host_values, sizeof(float) * n, cudaMemcpyHostToDevice)) != cudaSuccess) return fail(e);
  add_one_kernel<<<(n + 255) / 256, 256>>>(dev, n);
  if ((e = cudaGetLastError()) != cudaSuccess) return fail(e);
  if ((e = cudaMemcpy(host_values, dev, sizeof(float) * n, cudaMemcpyDeviceToHost)) != cudaSuccess) return fail(e);
  cudaFree(dev);
  return true;
}

}  // namespace df::cuda
