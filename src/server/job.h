// One generation request between the HTTP handler that made it and the scheduler that runs it: what to generate,
// the text and log-probabilities produced so far, how it ended. The handler waits on it and may cancel it (its
// client went away); the scheduler emits into it and finishes it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "diskformer/sampling/logprobs.h"
#include "diskformer/sampling/sampler.h"
#include "server/api_error.h"

namespace df::server {

struct GenParams {
  std::vector<int32_t> prompt;  // at least one token, at most the context
  int32_t max_tokens = -1;      // -1: until end of generation or a full context
  bool ignore_eos = false;
  sampling::SamplingParams sampling;
  std::vector<std::string> stop;
  int n_probs = -1;             // log-probabilities with this many alternatives per token; -1: none
};

struct TokenOut {
  int32_t id = -1;
  sampling::StepLogprobs logprobs;
};

struct JobEvent {
  std::string text;              // the next piece of the reply (valid UTF-8 except where the model made none)
  std::vector<TokenOut> tokens;  // the tokens generated since the last event (with n_probs >= 0)
};

struct JobResult {
  std::string finish_reason;     // "stop" (end of generation or a stop string) or "length"
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;     // of the prompt, reused from the slot's cache
  int64_t completion_tokens = 0;
  std::optional<ApiError> error;  // the generation failed (or the server stopped); nothing more follows
};

class Job {
 public:
  explicit Job(GenParams p) : params_(std::move(p)) {}
  const GenParams& params() const { return params_; }

  // Handler side: waits until events arrive, the job ends, or `timeout` passes; moves the events into `out` and
  // returns whether the job has ended (then result() holds how).
  bool wait(std::vector<JobEvent>& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return done_ || !events_.empty(); });
    while (!events_.empty()) {
      out.push_back(std::move(events_.front()));
      events_.pop_front();
    }
    return done_;
  }
  JobResult result() const {
    std::lock_guard<std::mutex> lock(mu_);
    return result_;
  }
  void cancel() { cancelled_ = true; }

  // Scheduler side.
  bool cancelled() const { return cancelled_; }
  void emit(JobEvent e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  }
  void finish(JobResult r) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      result_ = std::move(r);
      done_ = true;
    }
    cv_.notify_all();
  }

 private:
  const GenParams params_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<JobEvent> events_;
  JobResult result_;
  bool done_ = false;
  std::atomic<bool> cancelled_{false};
};

}  // namespace df::server
