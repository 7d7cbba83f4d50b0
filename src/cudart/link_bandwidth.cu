#include <cuda_runtime.h>

#include <algorithm>

#include "diskformer/cudart/devices.h"

namespace df::cuda {

namespace {

// Owns what one measurement allocates, so every early return frees it.
struct Resources {
  void* host = nullptr;
  void* dev = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Resources() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
    if (dev) cudaFree(dev);
    if (host) cudaFreeHost(host);
  }
};

Error cuda_error(const char* what, cudaError_t e) {
  return Error{std::string("pinned host-to-GPU measurement: ") + what + ": " + cudaGetErrorString(e)};
}

}  // namespace

Result<LinkBandwidth> measure_pinned_h2d(uint64_t total_bytes, uint64_t record_bytes) {
  if (record_bytes == 0 || record_bytes > total_bytes) record_bytes = total_bytes;
  const uint64_t n_records = total_bytes / record_bytes;
  total_bytes = n_records * record_bytes;
  Resources r;
  cudaError_t e;
  if ((e = cudaMallocHost(&r.host, total_bytes)) != cudaSuccess) return cuda_error("cudaMallocHost", e);
  if ((e = cudaMalloc(&r.dev, total_bytes)) != cudaSuccess) return cuda_error("cudaMalloc", e);
  if ((e = cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking)) != cudaSuccess)
    return cuda_error("cudaStreamCreate", e);
  if ((e = cudaEventCreate(&r.start)) != cudaSuccess || (e = cudaEventCreate(&r.stop)) != cudaSuccess)
    return cuda_error("cudaEventCreate", e);
  std::fill_n(static_cast<unsigned char*>(r.host), total_bytes, 1);  // touch every page before timing

  auto timed = [&](bool records, double* best) -> Status {
    for (int rep = 0; rep < 4; ++rep) {  // the first repeat warms up the link and the driver
      cudaEventRecord(r.start, r.stream);
      if (records) {
        for (uint64_t i = 0; i < n_records; ++i)
          cudaMemcpyAsync(static_cast<char*>(r.dev) + i * record_bytes, static_cast<char*>(r.host) + i * record_bytes,
                          record_bytes, cudaMemcpyHostToDevice, r.stream);
      } else {
        cudaMemcpyAsync(r.dev, r.host, total_bytes, cudaMemcpyHostToDevice, r.stream);
      }
      cudaEventRecord(r.stop, r.stream);
      cudaError_t err = cudaEventSynchronize(r.stop);
      if (err != cudaSuccess) return cuda_error("copy", err);
      float ms = 0;
      cudaEventElapsedTime(&ms, r.start, r.stop);
      if (rep > 0 && ms > 0) *best = std::max(*best, static_cast<double>(total_bytes) / (ms * 1e6));
    }
    return {};
  };
  LinkBandwidth out;
  DF_TRY(timed(false, &out.one_copy_GBps));
  DF_TRY(timed(true, &out.record_copies_GBps));
  return out;
}

}  // namespace df::cuda
