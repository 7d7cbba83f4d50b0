// GET /metrics: Prometheus' text format (version 0.0.4). What a person running a model larger than memory wants to
// watch: requests and tokens, throughput, the queue and the slots, memory in use against the budgets, the expert
// caches' hit rates, and the bytes read from disk and copied over PCIe. Engine figures come from the scheduler's
// latest snapshot of engine::Model::stats() and Session::stats().
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "server/scheduler.h"

namespace df::server {

// Responses by route and status, counted as they are written.
class RequestCounters {
 public:
  void add(const std::string& route, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[{route, status}];
  }
  std::map<std::pair<std::string, int>, uint64_t> snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> counts_;
};

struct MetricsContext {
  std::string backend;                  // "cpu" or "cuda"
  uint32_t n_ctx = 0;                   // per slot
  std::optional<uint64_t> ram_budget, gpu_budget;
  uint64_t rss_bytes = 0;               // the process's resident set now
};

std::string prometheus_text(const SchedulerStats& s, const std::map<std::pair<std::string, int>, uint64_t>& requests,
                            const MetricsContext& c);

// The process's resident set size in bytes (/proc/self/statm), 0 where it cannot be read.
uint64_t current_rss_bytes();

}  // namespace df::server
