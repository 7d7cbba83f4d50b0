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
  // Not reentrant: one job at a time, from the thread that owns the pool. `beside`, where given, runs once on the
  // calling thread after the job is posted and before that thread takes tasks: work of its own (a GPU run's CUDA
  // calls) that the workers' first tasks overlap. It must not use the pool.
  void run(int64_t n_tasks, const std::function<void(int64_t task)>& fn, const std::function<void()>& beside = {});

 private:
  void worker_loop();
  void work_on_current();
  // Blocks until generation_ holds an even value other than `seen` (or the pool stops); returns that value.
  uint64_t wait_for_job(uint64_t seen);

  int n_threads_;
  std::vector<std::thread> workers_;
  // A decode step posts hundreds of jobs: posting and joining one takes no lock unless a worker sleeps. The
  // generation is even while a job is open and odd while the owner changes the job's fields, so a worker that saw
  // a job late backs out instead of reading them half-written. Each counter has its own cache line: the spinning
  // workers read generation_ while the busy ones bump the task counters.
  alignas(64) std::atomic<uint64_t> generation_{1};
  alignas(64) std::atomic<int64_t> next_task_{0};
  alignas(64) std::atomic<int64_t> done_tasks_{0};
  alignas(64) std::atomic<int> active_{0};  // workers inside a job
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
  int64_t n_tasks_ = 0;
  const std::function<void(int64_t)>* fn_ = nullptr;
  std::mutex mu_;  // only for sleeping and waking
  std::condition_variable wake_;
};

// Physical cores where /sys tells them, hardware threads otherwise.
int default_thread_count();

}  // namespace df::cpu
