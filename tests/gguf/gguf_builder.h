// Hand-assembled GGUF bytes, so tests can plant one defect at a known offset.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace df::test {

struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof v);
    b.insert(b.end(), tmp, tmp + sizeof v);
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& pad_to(size_t alignment) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
  size_t size() const { return b.size(); }
};

// Header: magic, version, counts.
inline Bytes header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  Bytes x;
  x.put<uint32_t>(0x46554747).put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  return x;
}

inline void kv_u32(Bytes& x, const std::string& key, uint32_t v) { x.str(key).put<uint32_t>(4).put<uint32_t>(v); }

// One F32 tensor info: name, dims, type 0, relative offset.
inline void tensor_f32(Bytes& x, const std::string& name, std::vector<uint64_t> dims, uint64_t rel) {
  x.str(name).put<uint32_t>(static_cast<uint32_t>(dims.size()));
  for (auto d : dims) x.put<uint64_t>(d);
  x.put<uint32_t>(0).put<uint64_t>(rel);
}

}  // namespace df::test
