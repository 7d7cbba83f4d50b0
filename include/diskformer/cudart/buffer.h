// Device memory as move-only owners: a DeviceBuffer frees its allocation when it dies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diskformer/cudart/check.h"
#include "diskformer/util/result.h"

namespace df::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Out of device memory is an environmental failure (a model too large for the GPU): an error naming `what`.
  static Result<DeviceBuffer> alloc(uint64_t bytes, const std::string& what);
  // For work buffers whose size the caller has already checked: aborts on failure.
  explicit DeviceBuffer(uint64_t bytes);
  // Another buffer's memory, not freed by this one: the owner must outlive the view.
  static DeviceBuffer borrow(const DeviceBuffer& owner);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), owned_(o.owned_) {
    o.data_ = nullptr, o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  uint64_t size() const { return bytes_; }

  // Synchronous copies of `bytes` at byte `offset` of the buffer (bounds checked).
  void upload(const void* src, uint64_t bytes, uint64_t offset = 0);
  void download(void* dst, uint64_t bytes, uint64_t offset = 0) const;

 private:
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
  bool owned_ = true;
};

// A device buffer holding a copy of host values.
template <typename T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(v.empty() ? 1 : v.size() * sizeof(T));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

// n values of T from device memory.
template <typename T>
std::vector<T> to_host(const T* dev, uint64_t n) {
  std::vector<T> v(n);
  if (n) DF_CUDA_CHECK(cudaMemcpy(v.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace df::cuda
