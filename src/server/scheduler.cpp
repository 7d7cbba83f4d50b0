#include "server/scheduler.h"

#include <algorithm>
#include <optional>

#include "diskformer/engine/batch.h"
#include "diskformer/engine/generate.h"
#include "diskformer/engine/prefix_reuse.h"
#include "diskformer/sampling/logprobs.h"
#include "server/stop_strings.h"

namespace df::server {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
constexpr auto kRateWindow = std::chrono::seconds(5);
constexpr auto kSnapshotEvery = std::chrono::milliseconds(250);
}  // namespace

struct Scheduler::Slot {
  explicit Slot(engine::Session s) : session(std::move(s)) {}

  enum class Phase { kIdle, kPrefill, kSample, kDecode };

  engine::Session session;
  std::vector<int32_t> cached;          // the tokens whose keys and values the session holds
  std::vector<engine::EvalSpan> spans;  // the batch that computed each of them
  uint64_t last_used = 0;

  // The request being served.
  std::shared_ptr<Job> job;
  Phase phase = Phase::kIdle;
  std::vector<engine::PrefixStep> steps;
  size_t step = 0;
  uint32_t kept = 0;
  std::vector<int32_t> history;  // prompt and generated tokens, for the repeat penalty (as run keeps it)
  std::optional<sampling::Sampler> sampler;
  std::optional<tokenizer::StreamDecoder> decoder;
  std::optional<StopMatcher> stop;
  int32_t pending = -1;          // sampled, to be evaluated by the next decode step
  int32_t generated = 0;
  std::vector<TokenOut> tokens;  // log-probabilities not yet sent
  Clock::time_point started;
};

Scheduler::Scheduler(engine::Model& model, const tokenizer::Tokenizer& tok, const SchedulerOptions& options)
    : model_(model), tok_(tok), options_(options) {}

Result<std::unique_ptr<Scheduler>> Scheduler::create(engine::Model& model, const tokenizer::Tokenizer& tok,
                                                    const SchedulerOptions& options) {
  std::unique_ptr<Scheduler> s(new Scheduler(model, tok, options));
  // The batches run takes (the backend's), so that a prompt is evaluated as run evaluates it.
  const bool cuda = model.backend() == engine::Backend::kCuda;
  s->n_batch_ = std::max<uint32_t>(1, cuda ? model.options().gpu.max_batch : model.options().n_batch);
  s->exact_reuse_ = !cuda;
  for (uint32_t i = 0; i < std::max<uint32_t>(1, options.slots); ++i) {
    DF_ASSIGN(engine::Session session, engine::Session::create(model));
    s->slots_.push_back(std::make_unique<Slot>(std::move(session)));
  }
  s->stats_.slots = uint32_t(s->slots_.size());
  s->snapshot(true);
  s->thread_ = std::thread([p = s.get()] { p->loop(); });
  return s;
}

Scheduler::~Scheduler() { stop(); }

std::shared_ptr<Job> Scheduler::submit(GenParams params) {
  auto job = std::make_shared<Job>(std::move(params));
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The queue holds what the free slots take at the next turn, and max_queue more.
    const size_t free_slots = slots_.size() - busy_;
    if (stopping_ || queue_.size() >= options_.max_queue + free_slots) return nullptr;
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerStats s = stats_;
  s.busy = busy_;
  s.queued = uint32_t(queue_.size());
  const auto now = Clock::now();
  uint64_t tok[2] = {0, 0};
  double sec[2] = {0, 0};
  for (const Recent& r : recent_)
    if (now - r.at <= kRateWindow) {
      tok[r.decode] += r.tokens;
      sec[r.decode] += r.seconds;
    }
  s.prompt_tok_s = sec[0] > 0 ? double(tok[0]) / sec[0] : 0;
  s.decode_tok_s = sec[1] > 0 ? double(tok[1]) / sec[1] : 0;
  return s;
}

void Scheduler::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || busy_ > 0 || (!queue_.empty() && busy_ < slots_.size()); });
    if (stopping_) break;
    admit();
    lock.unlock();
    step();
    lock.lock();
  }
  std::deque<std::shared_ptr<Job>> queued;
  queued.swap(queue_);
  lock.unlock();
  const ApiError stopping{.status = 503, .message = "the server is shutting down", .type = "server_error",
                          .code = "server_shutting_down"};
  for (auto& s : slots_)
    if (s->job) fail(*s, stopping);
  for (auto& j : queued) j->finish({.error = stopping});
}

void Scheduler::admit() {
  while (!queue_.empty()) {
    std::shared_ptr<Job> job = queue_.front();
    if (job->cancelled()) {
      queue_.pop_front();
      ++stats_.requests_cancelled;
      continue;
    }
    Slot* best = nullptr;
    uint32_t best_keep = 0;
    for (auto& s : slots_) {
      if (s->job) continue;
      const uint32_t keep =
          engine::plan_prefix(s->cached, s->spans, job->params().prompt, n_batch_, exact_reuse_).keep;
      if (!best || keep > best_keep || (keep == best_keep && s->last_used < best->last_used)) {
        best = s.get();
        best_keep = keep;
      }
    }
    if (!best) return;
    queue_.pop_front();
    ++busy_;
    start(*best, std::move(job));
  }
}

void Scheduler::start(Slot& s, std::shared_ptr<Job> job) {
  const GenParams& p = job->params();
  const engine::PrefixPlan plan = engine::plan_prefix(s.cached, s.spans, p.prompt, n_batch_, exact_reuse_);
  s.session.truncate(plan.keep);
  s.cached.resize(plan.keep);
  s.spans.resize(plan.keep);
  s.kept = plan.keep;
  s.steps = plan.steps;
  s.step = 0;
  s.history = p.prompt;
  // As run's --ignore-eos: end-of-generation tokens are never chosen, not merely chosen and passed over.
  s.sampler.emplace(p.ignore_eos ? engine::with_eog_banned(p.sampling, s.session.n_vocab(),
                                                           [this](int32_t id) { return tok_.is_eog(id); })
                                 : p.sampling);
  s.decoder.emplace(tok_);
  s.stop.emplace(p.stop);
  s.pending = -1;
  s.generated = 0;
  s.tokens.clear();
  s.started = Clock::now();
  s.last_used = ++clock_;
  s.phase = Slot::Phase::kPrefill;
  s.job = std::move(job);
  stats_.cached_tokens += plan.keep;
}

void Scheduler::step() {
  for (auto& s : slots_)
    if (s->job && s->job->cancelled())
      end(*s, {.error = ApiError{.status = 499, .message = "cancelled", .type = "cancelled"}},
          stats_.requests_cancelled);

  // One batch of one prompt, the slots taking turns.
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = *slots_[(next_prefill_ + i) % slots_.size()];
    if (s.phase != Slot::Phase::kPrefill) continue;
    next_prefill_ = (next_prefill_ + i + 1) % slots_.size();
    prefill(s);
    break;
  }
  for (auto& s : slots_)
    if (s->phase == Slot::Phase::kSample) sample(*s);
  std::vector<Slot*> decoding;
  for (auto& s : slots_)
    if (s->phase == Slot::Phase::kDecode) decoding.push_back(s.get());
  if (!decoding.empty()) decode(decoding);
  // Where this turn ended the last generation, the loop waits idle next: the counters of its last steps go out now.
  const bool idle = std::none_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->job != nullptr; });
  snapshot(/*force=*/idle);
}

void Scheduler::prefill(Slot& s) {
  const engine::PrefixStep& st = s.steps[s.step];
  const std::vector<int32_t>& prompt = s.job->params().prompt;
  const uint32_t end = st.end;
  const auto t0 = Clock::now();
  const std::span<const int32_t> tokens(prompt.data() + st.begin, end - st.begin);
  if (Status r = s.session.eval(tokens); !r.ok()) {
    fail(s, {.status = 500, .message = "evaluating the prompt failed: " + r.error().message, .type = "server_error"});
    return;
  }
  account(false, tokens.size(), seconds_since(t0));
  s.cached.insert(s.cached.end(), tokens.begin(), tokens.end());
  engine::record_spans({.begin = st.begin, .end = end}, s.spans);
  ++s.step;
  if (s.step == s.steps.size()) s.phase = Slot::Phase::kSample;
}

void Scheduler::sample(Slot& s) {
  const GenParams& p = s.job->params();
  const int32_t id = s.session.next_token(*s.sampler, s.history);
  ++s.generated;
  s.history.push_back(id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.generated_tokens;
  }
  if (!p.ignore_eos && tok_.is_eog(id)) return finish(s, "stop");
  if (p.n_probs >= 0) {
    const std::span<const float> logits = s.session.logits();
    s.tokens.push_back({id, sampling::step_logprobs(logits.last(model_.spec().n_vocab), id, p.n_probs)});
  }
  emit(s, s.stop->push(s.decoder->push(id)), {});
  if (s.stop->stopped()) return finish(s, "stop");
  if (p.max_tokens >= 0 && s.generated >= p.max_tokens) return finish(s, "length");
  if (s.session.n_past() >= s.session.n_ctx()) return finish(s, "length");
  s.pending = id;
  s.phase = Slot::Phase::kDecode;
}

void Scheduler::decode(std::vector<Slot*>& slots) {
  std::vector<engine::Session*> sessions;
  std::vector<int32_t> tokens;
  for (Slot* s : slots) {
    sessions.push_back(&s->session);
    tokens.push_back(s->pending);
  }
  const auto t0 = Clock::now();
  if (Status r = engine::decode_batch(model_, sessions, tokens); !r.ok()) {
    for (Slot* s : slots) {
      fail(*s, {.status = 500, .message = "a decode step failed: " + r.error().message, .type = "server_error"});
    }
    return;
  }
  account(true, tokens.size(), seconds_since(t0));
  for (Slot* s : slots) {
    const uint32_t pos = uint32_t(s->cached.size());
    s->cached.push_back(s->pending);
    s->spans.push_back({pos, pos + 1});
    s->pending = -1;
    s->phase = Slot::Phase::kSample;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.decode_steps;
  stats_.last_batch = uint32_t(slots.size());
}

void Scheduler::emit(Slot& s, std::string text, std::vector<TokenOut> tokens) {
  if (tokens.empty()) tokens.swap(s.tokens);
  if (text.empty() && tokens.empty()) return;
  s.job->emit({std::move(text), std::move(tokens)});
}

void Scheduler::finish(Slot& s, const char* reason) {
  std::string tail;
  if (!s.stop->stopped()) {
    tail = s.stop->push(s.decoder->flush());
    tail += s.stop->flush();
  }
  emit(s, std::move(tail), {});
  end(s, {.finish_reason = reason,
          .prompt_tokens = int64_t(s.job->params().prompt.size()),
          .cached_tokens = s.kept,
          .completion_tokens = s.generated},
      stats_.requests_done);
}

void Scheduler::fail(Slot& s, ApiError e) {
  end(s, {.prompt_tokens = int64_t(s.job->params().prompt.size()),
          .cached_tokens = s.kept,
          .completion_tokens = s.generated,
          .error = std::move(e)},
      stats_.requests_failed);
}

void Scheduler::end(Slot& s, JobResult r, uint64_t& counter) {
  // Counted and freed before the client hears of the end, so that what it asks next sees both.
  std::shared_ptr<Job> job = s.job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counter;
  }
  release(s);
  job->finish(std::move(r));
}

void Scheduler::release(Slot& s) {
  // What the cache holds stays for the next request with the same prefix.
  s.cached.resize(std::min<size_t>(s.cached.size(), s.session.n_past()));
  s.spans.resize(s.cached.size());
  s.job.reset();
  s.phase = Slot::Phase::kIdle;
  s.sampler.reset();
  s.decoder.reset();
  s.stop.reset();
  s.tokens.clear();
  s.last_used = ++clock_;
  std::lock_guard<std::mutex> lock(mu_);
  --busy_;
}

void Scheduler::account(bool decode_step, uint64_t tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (decode_step) {
    stats_.decoded_tokens += tokens;
    stats_.decode_seconds += seconds;
  } else {
    stats_.prompt_tokens += tokens;
    stats_.prompt_seconds += seconds;
  }
  const auto now = Clock::now();
  recent_.push_back({now, decode_step, tokens, seconds});
  while (!recent_.empty() && now - recent_.front().at > kRateWindow) recent_.pop_front();
}

void Scheduler::snapshot(bool force) {
  const auto now = Clock::now();
  if (!force && now - last_snapshot_ < kSnapshotEvery) return;
  last_snapshot_ = now;
  engine::ModelStats m = model_.stats();
  std::vector<engine::SessionStats> each;
  for (auto& s : slots_) each.push_back(s->session.stats());
  engine::SessionStats ss = engine::sessions_together(each);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.model = std::move(m);
  stats_.session = std::move(ss);
}

}  // namespace df::server
