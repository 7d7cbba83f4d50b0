#include "diskformer/io/buffer.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace df::io {
namespace {

class PosixMemalignAllocator final : public HostAllocator {
 public:
  Result<void*> allocate(size_t bytes, size_t alignment) override {
    void* p = nullptr;
    int rc = posix_memalign(&p, alignment, bytes);
    if (rc != 0)
      return Error{"cannot allocate " + std::to_string(bytes) + " bytes aligned to " + std::to_string(alignment) +
                   ": " + std::strerror(rc)};
    return p;
  }
  void deallocate(void* p, size_t) override { std::free(p); }
  const char* name() const override { return "posix_memalign"; }
};

}  // namespace

HostAllocator& default_host_allocator() {
  static PosixMemalignAllocator allocator;
  return allocator;
}

Result<AlignedBuffer> AlignedBuffer::allocate(size_t bytes, size_t alignment, HostAllocator& allocator) {
  AlignedBuffer b;
  if (bytes == 0) return b;
  DF_ASSIGN(void* p, allocator.allocate(bytes, alignment));
  std::memset(p, 0, bytes);
  b.data_ = static_cast<uint8_t*>(p);
  b.size_ = bytes;
  b.allocator_ = &allocator;
  return b;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    allocator_ = std::exchange(o.allocator_, nullptr);
  }
  return *this;
}

void AlignedBuffer::reset() {
  if (data_) allocator_->deallocate(data_, size_);
  data_ = nullptr;
  size_ = 0;
  allocator_ = nullptr;
}

}  // namespace df::io
