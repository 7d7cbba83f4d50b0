// A persistent pool of worker threads for the kernels: run(n_tasks, fn) calls fn(task) for every task in
// [0, n_tasks) spread over the workers and the calling thread, and returns when all are done.
// Workers spin briefly between jobs (a forward pass issues many small jobs back to back), then sleep.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace df::cpu {

class ThreadPool {
 public:
  // A forward pass issues jobs back to back with short serial work between them: a worker that slept would need a
  // futex wake (tens of microseconds) per job, so it spins this long before sleeping.
  static constexpr std::chrono::milliseconds kSpinTime{2};

  explicit ThreadPool(int n_threads);  // n_threads counts the caller; 1 = no workers
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Not reentrant: one job at a time, from the thread that owns the pool.
  void run(int64_t n_tasks, const std::function<void(int64_t task)>& fn);

 private:
  void worker_loop();
  void work_on_current();

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_task_{0};
  std::atomic<int64_t> done_tasks_{0};
  std::atomic<int> active_{0};
  int64_t n_tasks_ = 0;
  const std::function<void(int64_t)>* fn_ = nullptr;
  bool stop_ = false;
};

// Physical cores where /sys tells them, hardware threads otherwise.
int default_thread_count();

}  // namespace df::cpu
