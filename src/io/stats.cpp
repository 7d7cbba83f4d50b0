#include "diskformer/io/stats.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace df::io {

// Bucket b = 4 * e + m covers [ (4 + m) << (e - 2), (5 + m) << (e - 2) ) for e >= 2; values below 4 get their own
// buckets. So the width of a bucket is a quarter of its power of two.
int LatencyHistogram::bucket_of(uint64_t ns) {
  if (ns < 4) return int(ns);
  int e = 63 - std::countl_zero(ns);               // ns in [2^e, 2^(e+1))
  int m = int((ns >> (e - 2)) & 3);                // the two bits after the leading one
  return std::min(kBuckets - 1, e * kSubBuckets + m);
}

uint64_t LatencyHistogram::bucket_upper(int b) {
  if (b < 2 * kSubBuckets) return uint64_t(std::min(b, 3));  // buckets 4..7 stay empty (values 4..7 land in 8..11)
  int e = b / kSubBuckets, m = b % kSubBuckets;
  if (e >= 63) return UINT64_MAX;
  return (uint64_t(5 + m) << (e - 2)) - 1;
}

void LatencyHistogram::add(uint64_t ns) {
  counts_[bucket_of(ns)]++;
  count_++;
  sum_ns_ += ns;
  max_ns_ = std::max(max_ns_, ns);
}

void LatencyHistogram::merge(const LatencyHistogram& o) {
  for (int i = 0; i < kBuckets; i++) counts_[i] += o.counts_[i];
  count_ += o.count_;
  sum_ns_ += o.sum_ns_;
  max_ns_ = std::max(max_ns_, o.max_ns_);
}

uint64_t LatencyHistogram::percentile_ns(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  uint64_t rank = std::max<uint64_t>(1, uint64_t(std::ceil(q * double(count_))));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; b++) {
    seen += counts_[b];
    if (seen >= rank) return std::min(bucket_upper(b), max_ns_);
  }
  return max_ns_;
}

}  // namespace df::io
