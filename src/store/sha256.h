// SHA-256 (FIPS 180-4), incremental: what the Hugging Face API gives as an LFS file's oid, checked after a download.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace df::store::detail {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::string hex();  // lowercase, 64 digits; ends the hash (call once)

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace df::store::detail
