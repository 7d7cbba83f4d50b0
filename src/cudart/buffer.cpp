#include <cstdio>
#include <cstdlib>
#include <utility>

#include "diskformer/cudart/buffer.h"
#include "diskformer/util/check.h"
#include "diskformer/util/size.h"

namespace df::cuda {

void cuda_fail(const char* expr, cudaError_t err, const char* file, int line) {
  std::fprintf(stderr, "diskformer: CUDA call failed: %s: %s (%s) at %s:%d\n", expr, cudaGetErrorString(err),
               cudaGetErrorName(err), file, line);
  std::abort();
}

Result<DeviceBuffer> DeviceBuffer::alloc(uint64_t bytes, const std::string& what) {
  DeviceBuffer b;
  cudaError_t e = cudaMalloc(&b.data_, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it so later checks start clean
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return Error{"GPU allocation of " + format_size(bytes) + " for " + what + " failed: " + cudaGetErrorString(e) +
                 " (" + format_size(free_b) + " free of " + format_size(total_b) + ")"};
  }
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::DeviceBuffer(uint64_t bytes) : bytes_(bytes) {
  DF_CUDA_CHECK(cudaMalloc(&data_, bytes ? bytes : 1));
}

DeviceBuffer DeviceBuffer::borrow(const DeviceBuffer& owner) {
  DeviceBuffer b;
  b.data_ = owner.data_;
  b.bytes_ = owner.bytes_;
  b.owned_ = false;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ && owned_) cudaFree(data_);  // no check: a destructor during an abort must not abort again
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ && owned_) cudaFree(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    owned_ = o.owned_;
  }
  return *this;
}

void DeviceBuffer::upload(const void* src, uint64_t bytes, uint64_t offset) {
  DF_CHECK(offset <= bytes_ && bytes <= bytes_ - offset);
  if (bytes) DF_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(data_) + offset, src, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* dst, uint64_t bytes, uint64_t offset) const {
  DF_CHECK(offset <= bytes_ && bytes <= bytes_ - offset);
  if (bytes) DF_CUDA_CHECK(cudaMemcpy(dst, static_cast<const uint8_t*>(data_) + offset, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace df::cuda
