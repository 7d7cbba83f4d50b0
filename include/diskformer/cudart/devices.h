// What the CUDA runtime sees: used by the CLI (default backend), by GPU tests (skip without a GPU) and by bench.
#pragma once

#include <cstdint>
#include <string>

#include "diskformer/util/result.h"

namespace df::cuda {

struct DeviceInfo {
  int count = 0;              // visible CUDA devices where device 0 (the one runs use) can run this build's kernels
  int visible = 0;            // visible CUDA devices, usable or not
  std::string name;           // device 0
  int sm_major = 0, sm_minor = 0;
  uint64_t total_bytes = 0;   // device 0 memory
  std::string why_none;       // when count == 0: the runtime's reason, or why device 0 cannot run this build
};

// Safe to call without a driver: reports count 0 and the reason.
DeviceInfo query_devices();

// The kernels' oldest GPU generation (Ampere).
inline constexpr int kMinSmMajor = 8;

// Why a device of compute capability major.minor cannot run this build (has_image: whether the runtime found code of
// this build it can load there), or "" where it can.
std::string unusable_reason(int sm_major, int sm_minor, bool has_image);

// Device memory in use as the driver reports it (cudaMemGetInfo: total - free; every process's allocations and
// contexts, as nvidia-smi sums them): what --gpu-budget limits.
uint64_t device_memory_used();

// Adds one to each of n floats on device 0 and copies them back: proves that code built here runs there.
// Returns false with a reason when no device can run it.
bool selftest_add_one(float* host_values, int n, std::string* why);

// Pinned host-to-GPU copy bandwidth on device 0, in GB/s (1e9 bytes per second), best of a few repeats:
// one copy of total_bytes, and the same bytes as back-to-back copies of record_bytes each (the expert-streaming
// pattern: one cudaMemcpyAsync per record on one stream).
struct LinkBandwidth {
  double one_copy_GBps = 0;
  double record_copies_GBps = 0;
};
Result<LinkBandwidth> measure_pinned_h2d(uint64_t total_bytes, uint64_t record_bytes);

}  // namespace df::cuda
