#include "store/range_hash.h"

#include <cstdio>
#include <algorithm>
#include <cstring>

namespace df::store::detail {

namespace {

constexpr uint64_t kP1 = 0x9e3779b185ebca87ull, kP2 = 0xc2b2ae3d27d4eb4full, kP3 = 0x165667b19e3779f9ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint64_t round(uint64_t lane, uint64_t word) { return rotl(lane + word * kP2, 31) * kP1; }

}  // namespace

void RangeHash::block(const uint8_t* p) {
  for (int i = 0; i < 4; ++i) lanes_[i] = round(lanes_[i], load64(p + 8 * i));
}

void RangeHash::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (tail_n_ > 0) {
    const size_t take = std::min(n, sizeof tail_ - tail_n_);
    std::memcpy(tail_ + tail_n_, p, take);
    tail_n_ += take;
    p += take;
    n -= take;
    if (tail_n_ < sizeof tail_) return;
    block(tail_);
    tail_n_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32) block(p);
  std::memcpy(tail_, p, n);
  tail_n_ = n;
}

uint64_t RangeHash::digest() const {
  uint64_t h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
  for (uint64_t lane : lanes_) h = (h ^ round(0, lane)) * kP1 + kP3;
  h += total_;
  size_t i = 0;
  for (; i + 8 <= tail_n_; i += 8) h = rotl(h ^ round(0, load64(tail_ + i)), 27) * kP1 + kP3;
  for (; i < tail_n_; ++i) h = rotl(h ^ (tail_[i] * kP3), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

std::string RangeHash::text() const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "lanes64:%016llx", static_cast<unsigned long long>(digest()));
  return buf;
}

}  // namespace df::store::detail
