// One sequence of a model, on whichever backend the model was opened for: its KV cache and forward passes, and the
// choice of the next token. Positions are appended by eval(); truncate() drops the tail so that a shared prefix is
// reused (the cache entries of kept positions are unchanged).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "diskformer/engine/model.h"
#include "diskformer/model/routing_stats.h"
#include "diskformer/sampling/sampler.h"
#include "diskformer/util/result.h"

namespace df::engine {

// What a run's stats line reports about where a session ran.
struct SessionStats {
  std::string backend;                       // "cpu" or "cuda"
  std::string device;                        // the GPU's name; empty on the CPU
  std::optional<uint64_t> device_bytes;      // GPU memory the model and this session hold
  std::optional<uint64_t> own_device_bytes;  // the part of it that is this session's own (KV cache, state, logits)
  std::optional<uint64_t> device_used_peak;  // driver-reported use of the whole device, peak of its samples
  uint64_t cpu_experts = 0;                  // streamed experts the CPU computed instead of the GPU (decode)
  // CUDA with streamed experts: the host's seconds in their layers so far, and of them those blocked on the GPU at
  // the routers' round trips and those computing the CPU's share (the rest plans and queues copies and launches).
  double expert_host_s = 0, expert_gpu_wait_s = 0, expert_cpu_s = 0;
};

// The sessions of one model together (the server's slots): the model's GPU memory once and every session's own, the
// highest peak, the experts all of them computed on the CPU. Backend and device are the first's.
SessionStats sessions_together(std::span<const SessionStats> each);

class Sequence;  // a backend's sequence (engine/sequence.h)
class Session;
// One decode step of several sessions together (batch.h).
Status decode_batch(Model& model, std::span<Session* const> sessions, std::span<const int32_t> tokens);

class Session {
 public:
  // Errors: the backend cannot allocate the sequence (GPU memory, with the sizes).
  static Result<Session> create(Model& model);
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // Runs tokens after the n_past() cached positions (in batches the backend takes). all_logits keeps the logits of
  // every token ([n][n_vocab] in logits()), otherwise only the last one's. Errors: context overflow, a token outside
  // the vocabulary, a failed read of a streamed record (nothing of the failed batch is kept).
  Status eval(std::span<const int32_t> tokens, bool all_logits = false);
  // The logits of the last eval (copied from the device on first use).
  std::span<const float> logits();
  // The token after the last eval by the sampler's rules (history: the tokens so far, for the repeat penalty);
  // every backend returns what sampler.sample() returns on the same logits with the same seed.
  int32_t next_token(sampling::Sampler& sampler, std::span<const int32_t> history);
  uint32_t n_past() const;
  uint32_t n_ctx() const;
  uint32_t n_vocab() const;  // logits per token
  void truncate(uint32_t n_keep);
  SessionStats stats();
  // Where the routers send tokens, recorded while set (CPU sessions; nullptr: not recorded). Not owned.
  void set_routing_stats(model::RoutingStats* r);

 private:
  friend Status decode_batch(Model& model, std::span<Session* const> sessions, std::span<const int32_t> tokens);
  explicit Session(std::unique_ptr<Sequence> s);
  std::unique_ptr<Sequence> seq_;
};

}  // namespace df::engine
