#include "diskformer/cudart/pinned.h"

#include <cuda_runtime.h>

#include "diskformer/util/size.h"

namespace df::cuda {

namespace {

class PinnedAllocator final : public io::HostAllocator {
 public:
  Result<void*> allocate(size_t bytes, size_t alignment) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: later calls start clean
      return Error{"pinned host allocation of " + format_size(bytes) + " failed: " + cudaGetErrorString(e)};
    }
    // Large blocks start on a page, which the O_DIRECT reads into them need; small ones may not (the driver
    // suballocates them), refused here for callers that asked for a page.
    if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
      cudaFreeHost(p);
      return Error{"pinned host allocation of " + format_size(bytes) + " is not " + std::to_string(alignment) +
                   "-byte aligned"};
    }
    return p;
  }
  void deallocate(void* p, size_t) override { cudaFreeHost(p); }
  const char* name() const override { return "cuda_pinned"; }
};

}  // namespace

io::HostAllocator& pinned_host_allocator() {
  static PinnedAllocator a;
  return a;
}

}  // namespace df::cuda
