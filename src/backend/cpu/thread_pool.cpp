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
    stop_.store(true);
    generation_.store((generation_.load() | 1) + 1);  // even: spinning workers leave their loop and see stop_
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

void ThreadPool::run(int64_t n_tasks, const std::function<void(int64_t)>& fn, const std::function<void()>& beside) {
  if (n_tasks <= 0) {
    if (beside) beside();
    return;
  }
  if (workers_.empty() || n_tasks == 1) {
    if (beside) beside();
    for (int64_t t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  // The generation is odd and no worker is inside a job: the fields are the owner's.
  fn_ = &fn;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  done_tasks_.store(0, std::memory_order_relaxed);
  const uint64_t open = generation_.load(std::memory_order_relaxed) + 1;
  generation_.store(open);
  // A worker counts itself sleeping before it checks the generation under the mutex, so either it sees this job
  // there or it is counted here and woken.
  if (sleeping_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    wake_.notify_all();
  }
  if (beside) beside();
  work_on_current();
  while (done_tasks_.load(std::memory_order_acquire) < n_tasks) cpu_relax();
  // Close the job, then wait for the workers inside it: they find no task left and leave. One that sees the job
  // only now finds the generation moved on and backs out without touching the fields.
  generation_.store(open + 1);
  while (active_.load() != 0) cpu_relax();
}

uint64_t ThreadPool::wait_for_job(uint64_t seen) {
  auto posted = [&](uint64_t g) { return g != seen && g % 2 == 0; };
  const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
  for (int i = 0;; ++i) {
    const uint64_t g = generation_.load(std::memory_order_acquire);
    if (posted(g)) return g;
    cpu_relax();
    if ((i & 255) == 255 && std::chrono::steady_clock::now() > spin_until) break;
  }
  sleeping_.fetch_add(1);
  uint64_t g = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait(lock, [&] { return posted(g = generation_.load()); });
  }
  sleeping_.fetch_sub(1);
  return g;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    const uint64_t g = wait_for_job(seen);
    if (stop_.load()) return;
    seen = g;
    active_.fetch_add(1);
    // Counted inside before checking that the job is still open: run() closes it before it waits for active_ to
    // reach zero, so a job seen open here keeps its fields until this worker leaves.
    if (generation_.load() == g) work_on_current();
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
