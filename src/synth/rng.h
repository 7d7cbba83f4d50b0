// The generator behind synth's seeded weights: fixed streams per (seed, tensor, chunk), independent of threads.
#pragma once

#include <cstdint>

namespace df::synth {

// splitmix64: seeds and fast, well-mixed 64-bit words.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  uint32_t below(uint32_t n) { return uint32_t(next() % n); }
};

inline uint64_t mix(uint64_t a, uint64_t b) {
  Rng r{a * 0x9e3779b97f4a7c15ULL ^ b};
  return r.next();
}

}  // namespace df::synth
