// Aligned host memory for reads that go around the page cache (O_DIRECT wants the buffer, the file offset and the
// length aligned to the device's block, 4 KiB here). The allocator is an interface so that a CUDA build can hand out
// pinned memory (cudaHostAlloc) from the same call sites later; the default one uses posix_memalign.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "diskformer/util/result.h"

namespace df::io {

constexpr size_t kDirectAlignment = 4096;  // offset, length and buffer alignment of every O_DIRECT read

constexpr uint64_t align_down(uint64_t x, uint64_t a) { return x - x % a; }
constexpr uint64_t align_up(uint64_t x, uint64_t a) { return align_down(x + a - 1, a); }
inline bool is_aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  // bytes > 0; alignment a power of two >= sizeof(void*). The error names the size.
  virtual Result<void*> allocate(size_t bytes, size_t alignment) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;
  virtual const char* name() const = 0;  // "posix_memalign", "cuda_pinned", ...
};

// The process-wide posix_memalign allocator (stateless, so sharing it is not shared mutable state).
HostAllocator& default_host_allocator();

// Owns one aligned allocation; move-only. Zero-filled on allocation so that tails past a short read are
// deterministic.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  static Result<AlignedBuffer> allocate(size_t bytes, size_t alignment = kDirectAlignment,
                                        HostAllocator& allocator = default_host_allocator());
  ~AlignedBuffer() { reset(); }
  AlignedBuffer(AlignedBuffer&& o) noexcept { *this = std::move(o); }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void reset();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  HostAllocator* allocator_ = nullptr;
};

}  // namespace df::io
