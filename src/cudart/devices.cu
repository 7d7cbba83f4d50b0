#include <cuda_runtime.h>

#include "diskformer/cudart/devices.h"

#include "diskformer/cudart/check.h"

namespace df::cuda {

namespace {
__global__ void add_one_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

#ifndef DISKFORMER_CUDA_ARCHS
#define DISKFORMER_CUDA_ARCHS "?"
#endif
}  // namespace

std::string unusable_reason(int sm_major, int sm_minor, bool has_image) {
  const std::string cc = "compute capability " + std::to_string(sm_major) + "." + std::to_string(sm_minor);
  if (sm_major < kMinSmMajor)
    return cc + ", and diskformer's kernels need " + std::to_string(kMinSmMajor) + ".0 or later (cp.async, bf16 and "
           "int8 tensor-core instructions)";
  if (!has_image)
    return cc + " has no code in this build (built for " DISKFORMER_CUDA_ARCHS "); configure with "
           "-DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(sm_major) + std::to_string(sm_minor) + " or =native";
  return {};
}

DeviceInfo query_devices() {
  DeviceInfo info;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    info.why_none = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device";
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return info;
  }
  info.visible = n;
  cudaDeviceProp prop{};
  if ((err = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
    info.why_none = cudaGetErrorString(err);
    cudaGetLastError();
    return info;
  }
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.total_bytes = prop.totalGlobalMem;
  // The runtime's own answer to whether a kernel of this build loads there (this file is built for the same
  // architectures as the kernels): an older GPU, or one the build has neither machine code nor PTX for, would
  // otherwise fail at the first launch, in the middle of a run.
  cudaFuncAttributes attr{};
  const bool has_image = cudaFuncGetAttributes(&attr, add_one_kernel) == cudaSuccess;
  cudaGetLastError();
  info.why_none = unusable_reason(prop.major, prop.minor, has_image);
  if (!info.why_none.empty()) {
    info.why_none = info.name + ": " + info.why_none;
    return info;
  }
  info.count = n;
  return info;
}

uint64_t device_memory_used() {
  size_t free_b = 0, total_b = 0;
  DF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return uint64_t(total_b - free_b);
}

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
