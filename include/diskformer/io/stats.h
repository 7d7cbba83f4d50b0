// Counters of a Reader: bytes, requests, and request latency (submit to completion) as a log-linear histogram,
// so that percentiles are available without keeping every sample.
#pragma once

#include <array>
#include <cstdint>

namespace df::io {

// Buckets: 4 per power of two of nanoseconds (relative error of a reported percentile <= 19%).
class LatencyHistogram {
 public:
  static constexpr int kSubBuckets = 4;
  static constexpr int kBuckets = 64 * kSubBuckets;

  void add(uint64_t ns);
  void merge(const LatencyHistogram& other);
  uint64_t count() const { return count_; }
  uint64_t sum_ns() const { return sum_ns_; }
  uint64_t max_ns() const { return max_ns_; }
  double mean_ns() const { return count_ ? double(sum_ns_) / double(count_) : 0.0; }
  // The upper edge of the bucket holding the q-quantile (q in [0, 1]), capped at max_ns(); 0 when empty.
  uint64_t percentile_ns(double q) const;

  static int bucket_of(uint64_t ns);
  static uint64_t bucket_upper(int bucket);

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0, sum_ns_ = 0, max_ns_ = 0;
};

struct IoStats {
  uint64_t requests = 0;        // caller requests completed (ok or failed)
  uint64_t failed = 0;          // of which ended with an error
  uint64_t bytes = 0;           // bytes handed to callers
  uint64_t device_reads = 0;    // read calls issued to the kernel (resumes and alignment pieces included)
  uint64_t device_bytes = 0;    // bytes the kernel returned, alignment padding included
  uint64_t bounced_bytes = 0;   // bytes copied out of aligned bounce buffers into caller buffers
  uint64_t short_reads = 0;     // reads resumed after returning fewer bytes than asked
  uint64_t retries = 0;         // EAGAIN / EINTR resubmissions
  uint64_t direct_fallbacks = 0;  // files switched from O_DIRECT to buffered reads after the kernel refused
  LatencyHistogram latency;     // per caller request, from submit() to completion
};

}  // namespace df::io
