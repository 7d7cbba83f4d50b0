#include "diskformer/backend/cpu/membw.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

namespace df::cpu {

namespace {

// Sums 64-bit words so the reads cannot be optimized away; 4 independent chains keep several loads in flight.
uint64_t sum_words(const uint64_t* p, uint64_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  uint64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

}  // namespace

MemBandwidth measure_read_bandwidth(ThreadPool& pool, uint64_t bytes, int passes) {
  const uint64_t words = bytes / 8;
  std::vector<uint64_t> buf(words);
  // Touch every page (and give the words values) before timing.
  for (uint64_t i = 0; i < words; ++i) buf[i] = i;
  const int64_t tasks = pool.size() * 4;
  std::atomic<uint64_t> sink{0};
  MemBandwidth r;
  r.bytes = words * 8;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run(tasks, [&](int64_t t) {
      const uint64_t begin = words * uint64_t(t) / uint64_t(tasks), end = words * uint64_t(t + 1) / uint64_t(tasks);
      sink.fetch_add(sum_words(buf.data() + begin, end - begin), std::memory_order_relaxed);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.read_GBps = std::max(r.read_GBps, double(r.bytes) / s / 1e9);
  }
  if (sink.load() == 42) r.read_GBps += 0;  // keeps the sums observable
  return r;
}

}  // namespace df::cpu
