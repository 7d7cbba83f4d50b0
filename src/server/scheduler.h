// The server's generation loop: --parallel slots, each an engine::Session with its own KV cache, fed from one queue
// by one thread (a model's sessions never run at once). Each turn of the loop
//   - gives a waiting request the free slot whose cache holds the longest reusable prefix of its prompt
//     (engine/prefix_reuse.h: on the CPU the reuse never changes a bit of the reply);
//   - evaluates one batch of one slot's prompt (the batches run prefills in, so that the others wait at most one
//     batch between their steps);
//   - samples the next token of every slot whose logits are fresh, exactly as `run` does (engine::generate's order
//     of checks), and sends its text;
//   - steps every decoding slot at once with engine::decode_batch: on the CPU one forward pass, each routed expert
//     loaded once per step for all the sequences that use it.
// A cancelled request (its client went away) frees its slot at the next turn; its cache stays for reuse.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "diskformer/engine/model.h"
#include "diskformer/engine/session.h"
#include "diskformer/tokenizer/tokenizer.h"
#include "diskformer/util/result.h"
#include "server/job.h"

namespace df::server {

struct SchedulerOptions {
  uint32_t slots = 1;
  uint32_t max_queue = 64;  // requests waiting for a busy slot; more are refused (503)
};

struct SchedulerStats {
  uint32_t slots = 0, busy = 0, queued = 0;
  uint64_t requests_done = 0, requests_cancelled = 0, requests_failed = 0;
  uint64_t prompt_tokens = 0;     // evaluated
  uint64_t cached_tokens = 0;     // reused from a slot's cache instead
  uint64_t generated_tokens = 0;  // sampled
  uint64_t decoded_tokens = 0;    // evaluated by decode steps
  uint64_t decode_steps = 0;      // batched steps; decoded / steps is the mean batch
  uint32_t last_batch = 0;        // sequences in the latest decode step
  double prompt_seconds = 0, decode_seconds = 0;
  double prompt_tok_s = 0, decode_tok_s = 0;  // over the steps of the last few seconds (0: none)
  engine::ModelStats model;       // as of the latest step (sampled at most a few times a second)
  engine::SessionStats session;
};

class Scheduler {
 public:
  // Errors: a session that cannot be made (GPU memory, with the sizes).
  static Result<std::unique_ptr<Scheduler>> create(engine::Model& model, const tokenizer::Tokenizer& tok,
                                                   const SchedulerOptions& options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request; nullptr when the queue is full or the scheduler has stopped.
  std::shared_ptr<Job> submit(GenParams params);
  // Ends every request (with an error saying the server stops) and the loop. Idempotent.
  void stop();
  SchedulerStats stats() const;
  uint32_t batch_tokens() const { return n_batch_; }

 private:
  struct Slot;
  Scheduler(engine::Model& model, const tokenizer::Tokenizer& tok, const SchedulerOptions& options);
  void loop();
  void admit();                       // under mu_
  void step();                        // engine work, without mu_
  void start(Slot& s, std::shared_ptr<Job> job);
  void prefill(Slot& s);
  void sample(Slot& s);
  void decode(std::vector<Slot*>& slots);
  void emit(Slot& s, std::string text, std::vector<TokenOut> tokens);
  void finish(Slot& s, const char* reason);
  void fail(Slot& s, ApiError e);
  void end(Slot& s, JobResult r, uint64_t& counter);  // counter: of stats_, under mu_
  void release(Slot& s);
  void account(bool decode_step, uint64_t tokens, double seconds);
  void snapshot(bool force);

  engine::Model& model_;
  tokenizer::Tokenizer tok_;
  SchedulerOptions options_;
  uint32_t n_batch_ = 512;
  bool exact_reuse_ = true;
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t next_prefill_ = 0;
  uint64_t clock_ = 0;  // orders slot use, for the least recently used choice

  mutable std::mutex mu_;  // the queue, the flags and the counters below
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  uint32_t busy_ = 0;
  bool stopping_ = false;
  SchedulerStats stats_;
  struct Recent {
    std::chrono::steady_clock::time_point at;
    bool decode;
    uint64_t tokens;
    double seconds;
  };
  std::deque<Recent> recent_;
  std::chrono::steady_clock::time_point last_snapshot_{};

  std::thread thread_;
};

}  // namespace df::server
