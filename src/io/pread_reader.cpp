// The portable backend: a pool of threads, each taking one op at a time and calling pread(2) once for it. Results go
// back to the owner thread, which resumes short reads and retries through the shared core.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "io/reader_core.h"

namespace df::io::detail {
namespace {

class PreadReader final : public ReaderCore {
 public:
  explicit PreadReader(const ReaderOptions& options) : ReaderCore(Backend::kPread, options) {
    unsigned n = options_.threads ? options_.threads : std::min(options_.queue_depth, 64u);
    workers_.reserve(n);
    for (unsigned i = 0; i < n; i++) workers_.emplace_back([this] { work(); });
  }

  ~PreadReader() override {
    drain();
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    todo_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

 protected:
  void start(Op* op) override {
    {
      std::lock_guard lock(mu_);
      todo_.push_back(op);
    }
    todo_cv_.notify_one();
  }

  void reap(bool block) override {
    std::vector<std::pair<Op*, int64_t>> done;
    {
      std::unique_lock lock(mu_);
      if (block) done_cv_.wait(lock, [&] { return !done_.empty(); });
      done.swap(done_);
    }
    for (auto& [op, res] : done) device_done(op, res);
  }

 private:
  void work() {
    for (;;) {
      Op* op;
      {
        std::unique_lock lock(mu_);
        todo_cv_.wait(lock, [&] { return stop_ || !todo_.empty(); });
        if (todo_.empty()) return;
        op = todo_.front();
        todo_.pop_front();
      }
      ssize_t n = ::pread(op->fd, op->cur_buf(), op->cur_length(), off_t(op->cur_offset()));
      int64_t res = n >= 0 ? int64_t(n) : -int64_t(errno);
      {
        std::lock_guard lock(mu_);
        done_.emplace_back(op, res);
      }
      done_cv_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable todo_cv_, done_cv_;
  std::deque<Op*> todo_;
  std::vector<std::pair<Op*, int64_t>> done_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

Result<std::unique_ptr<Reader>> make_pread_reader(const ReaderOptions& options) {
  return std::unique_ptr<Reader>(new PreadReader(options));
}

}  // namespace df::io::detail
