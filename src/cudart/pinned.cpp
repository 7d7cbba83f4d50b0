#include "diskformer/cudart/pinned.h"

#include <cuda_runtime.h>

#include <mutex>
#include <unordered_map>

#include "diskformer/util/size.h"

namespace df::cuda {

namespace {

class PinnedAllocator final : public io::HostAllocator {
 public:
  Result<void*> allocate(size_t bytes, size_t alignment) override {
    DF_ASSIGN(void* p, host_alloc(bytes));
    if (reinterpret_cast<uintptr_t>(p) % alignment == 0) return p;
    // Large blocks start on a page, which the O_DIRECT reads into them need; small ones may not (the driver
    // suballocates them): such a block is allocated again with room to start on the boundary, and remembered.
    cudaFreeHost(p);
    DF_ASSIGN(p, host_alloc(bytes + alignment));
    const uintptr_t at = (reinterpret_cast<uintptr_t>(p) + alignment - 1) / alignment * alignment;
    void* aligned = reinterpret_cast<void*>(at);
    std::lock_guard lock(mu_);
    padded_.emplace(aligned, p);
    return aligned;
  }
  void deallocate(void* p, size_t) override {
    {
      std::lock_guard lock(mu_);
      if (auto it = padded_.find(p); it != padded_.end()) {
        p = it->second;
        padded_.erase(it);
      }
    }
    cudaFreeHost(p);
  }
  const char* name() const override { return "cuda_pinned"; }

 private:
  static Result<void*> host_alloc(size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: later calls start clean
      return Error{"pinned host allocation of " + format_size(bytes) + " failed: " + cudaGetErrorString(e)};
    }
    return p;
  }

  std::mutex mu_;
  std::unordered_map<void*, void*> padded_;  // aligned start -> the block cudaHostAlloc returned
};

}  // namespace

io::HostAllocator& pinned_host_allocator() {
  static PinnedAllocator a;
  return a;
}

}  // namespace df::cuda
