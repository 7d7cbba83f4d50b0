#include "diskformer/backend/cpu/thread_pool.h"

#include <chrono>
#include <fstream>
#include <set>
#include <string>

#include "diskformer/util/check.h"

namespace df::cpu {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on_current() {
  for (;;) {
    const int64_t t = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (t >= n_tasks_) break;
    (*fn_)(t);
    done_tasks_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::run(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  if (n_tasks <= 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A worker that joined the previous job late leaves it before this one's fields change.
    while (active_.load(std::memory_order_acquire) != 0) {
    }
    fn_ = &fn;
    n_tasks_ = n_tasks;
    next_task_.store(0);
    done_tasks_.store(0);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  work_on_current();
  while (done_tasks_.load(std::memory_order_acquire) < n_tasks) cpu_relax();
  // Workers that woke late must not touch this job's fn after run() returns.
  while (active_.load(std::memory_order_acquire) != 0) {
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    for (int i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
      cpu_relax();
      if ((i & 255) == 255 && std::chrono::steady_clock::now() > spin_until) break;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
    }
    std::unique_lock<std::mutex> lock(mu_);
    seen = generation_.load();
    if (stop_) return;
    active_.fetch_add(1);
    lock.unlock();
    work_on_current();
    active_.fetch_sub(1, std::memory_order_release);
  }
}

int default_thread_count() {
  std::set<std::pair<std::string, std::string>> cores;
  for (unsigned cpu = 0; cpu < 4096; ++cpu) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream pkg(base + "physical_package_id"), core(base + "core_id");
    if (!pkg || !core) break;
    std::string p, c;
    pkg >> p;
    core >> c;
    cores.insert({p, c});
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

}  // namespace df::cpu
