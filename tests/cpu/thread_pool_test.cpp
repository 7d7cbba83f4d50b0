// The kernels' thread pool: every task of a job once, late and sleeping workers, and the ranges that the steps
// between the products split a batch into.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cpu/thread_pool.h"

namespace df::cpu {
namespace {

TEST(ThreadPool, RunsEveryTaskOnceAcrossManyJobs) {
  ThreadPool pool(3);
  for (int job = 0; job < 200; ++job) {
    const int64_t n = 1 + job % 37;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.run(n, [&](int64_t t) { hits[size_t(t)].fetch_add(1); });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "job " << job;
  }
}

TEST(ThreadPool, BackToBackJobsRunOnlyTheirOwnTasks) {
  // More workers than cores, so that workers are preempted between seeing a job and joining it: one that joins
  // late must find the job closed, never run a task of the job after it or one whose run() has returned.
  ThreadPool pool(8);
  std::atomic<int> current{-1};
  std::atomic<int> stale{0};
  for (int job = 0; job < 20000; ++job) {
    const int64_t n = 2 + job % 5;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    current.store(job);
    pool.run(n, [&, job](int64_t t) {
      if (current.load() != job) stale.fetch_add(1);
      hits[size_t(t)].fetch_add(1);
    });
    current.store(-1);
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "job " << job;
  }
  EXPECT_EQ(stale.load(), 0);
}

TEST(ThreadPool, RunsBesideOnceOnTheCallerWhileWorkersTakeTasks) {
  ThreadPool pool(3);
  const auto caller = std::this_thread::get_id();
  for (const int64_t n : {0, 1, 2, 64}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> beside_runs{0}, done_by_workers{0};
    std::atomic<bool> beside_on_caller{false};
    pool.run(
        n,
        [&](int64_t t) {
          hits[size_t(t)].fetch_add(1);
          if (std::this_thread::get_id() != caller) done_by_workers.fetch_add(1);
        },
        [&] {
          beside_runs.fetch_add(1);
          beside_on_caller.store(std::this_thread::get_id() == caller);
          // Where there are tasks for the workers, they take some while the caller is busy here.
          const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (n > 1 && done_by_workers.load() == 0 && std::chrono::steady_clock::now() < give_up)
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        });
    EXPECT_EQ(beside_runs.load(), 1) << n << " tasks";
    EXPECT_TRUE(beside_on_caller.load()) << n << " tasks";
    if (n > 1) EXPECT_GT(done_by_workers.load(), 0) << n << " tasks";
    for (auto& h : hits) EXPECT_EQ(h.load(), 1) << n << " tasks";
  }
}

TEST(ThreadPool, WakesSleepingWorkersAndStopsWithThem) {
  auto pool = std::make_unique<ThreadPool>(3);
  for (int round = 0; round < 3; ++round) {
    // Longer than the spin time: the workers are asleep when the job comes. Its first task waits for a task on
    // another thread, so the job ends only once a sleeping worker has woken (or the wait gives up).
    std::this_thread::sleep_for(ThreadPool::kSpinTime * 5);
    const auto caller = std::this_thread::get_id();
    std::atomic<bool> other{false};
    std::atomic<int> ran{0};
    pool->run(4, [&](int64_t) {
      if (std::this_thread::get_id() != caller) other.store(true);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!other.load() && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      ran.fetch_add(1);
    });
    EXPECT_TRUE(other.load()) << "round " << round << ": no sleeping worker woke for the job";
    EXPECT_EQ(ran.load(), 4);
  }
  std::this_thread::sleep_for(ThreadPool::kSpinTime * 5);
  pool.reset();  // joins workers that sleep
}

TEST(Ops, ForRangesCoversEachElementOnceInAlignedRanges) {
  ThreadPool pool(3);
  Context ctx;
  ctx.pool = &pool;
  for (const int64_t n : {0, 1, 7, 100, 16383, 100000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> calls{0};
    ctx.for_ranges(n, 8, 1000, [&](int64_t i0, int64_t i1) {
      calls.fetch_add(1);
      EXPECT_EQ(i0 % 8, 0);
      EXPECT_TRUE(i1 % 8 == 0 || i1 == n);
      for (int64_t i = i0; i < i1; ++i) hits[size_t(i)].fetch_add(1);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "n " << n;
    // Under two grains the elements stay on the calling thread, in one range; beyond, one range per thread.
    EXPECT_EQ(calls.load(), n == 0 ? 0 : n < 2000 ? 1 : 3) << "n " << n;
  }
}

}  // namespace
}  // namespace df::cpu
