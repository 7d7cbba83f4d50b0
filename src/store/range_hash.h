// A fast 64-bit hash of a byte stream, the same however the stream is cut into update() calls. A checkpoint records
// the hash of the source bytes it adds, and a resumed ingest reads those bytes again: a source whose bytes changed
// under the same size and mtime (or on a server that sends neither ETag nor Last-Modified) is then noticed instead
// of ending in a store that mixes two files. Four lanes of multiply-rotate rounds over 8-byte words (the shape of
// xxHash64, not its values), several GB/s: it detects changes, not adversaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace df::store::detail {

class RangeHash {
 public:
  void update(const void* data, size_t n);
  uint64_t digest() const;
  std::string text() const;  // "lanes64:0123456789abcdef"

 private:
  void block(const uint8_t* p);  // 32 bytes, one word per lane

  uint64_t lanes_[4] = {0x60ea27eeadc0b5d6ull, 0xc2b2ae3d27d4eb4full, 0x0ull, 0x61c8864e7a143579ull};
  uint8_t tail_[32] = {};
  size_t tail_n_ = 0;
  uint64_t total_ = 0;
};

}  // namespace df::store::detail
