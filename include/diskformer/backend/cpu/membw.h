// A quick multi-threaded memory read benchmark: the bandwidth the kernels' weight reads are measured against.
#pragma once

#include <cstdint>

#include "diskformer/backend/cpu/thread_pool.h"

namespace df::cpu {

struct MemBandwidth {
  double read_GBps = 0;  // best of the passes, 1e9 bytes per second
  uint64_t bytes = 0;    // buffer size read per pass
};

// Reads a buffer of `bytes` (default 512 MiB, larger than any cache) `passes` times with every thread of the pool.
MemBandwidth measure_read_bandwidth(ThreadPool& pool, uint64_t bytes = 512ull << 20, int passes = 4);

}  // namespace df::cpu
