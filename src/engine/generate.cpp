#include "diskformer/engine/generate.h"

#include <sys/resource.h>

#include <chrono>

namespace df::engine {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kPredicted: return "n_predict";
    case StopReason::kEndOfGeneration: return "eog";
    case StopReason::kContextFull: return "context";
    case StopReason::kStopped: return "stopped";
  }
  return "?";
}

GenerateStats& GenerateStats::operator+=(const GenerateStats& o) {
  prompt_tokens += o.prompt_tokens;
  prompt_seconds += o.prompt_seconds;
  gen_tokens += o.gen_tokens;
  decode_evals += o.decode_evals;
  gen_seconds += o.gen_seconds;
  stop = o.stop;
  return *this;
}

sampling::SamplingParams with_eog_banned(sampling::SamplingParams params, uint32_t n_vocab,
                                         const std::function<bool(int32_t)>& is_eog) {
  for (uint32_t id = 0; id < n_vocab; ++id)
    if (is_eog(int32_t(id))) params.banned.push_back(int32_t(id));
  return params;
}

Result<GenerateStats> generate(Session& session, std::span<const int32_t> prompt, const GenerateOptions& o,
                               const GenerateHooks& hooks, std::vector<int32_t>& history) {
  GenerateStats st;
  if (prompt.empty()) return Error{"the prompt has no tokens"};
  if (session.n_past() + prompt.size() > session.n_ctx())
    return Error{"context overflow: the prompt has " + std::to_string(prompt.size()) + " tokens after " +
                 std::to_string(session.n_past()) + " cached positions, the context size is " +
                 std::to_string(session.n_ctx()) + " (-c)"};
  const sampling::SamplingParams params =
      o.ignore_eos && hooks.is_eog ? with_eog_banned(o.sampling, session.n_vocab(), hooks.is_eog) : o.sampling;

  auto t0 = std::chrono::steady_clock::now();
  DF_TRY(session.eval(prompt));
  st.prompt_tokens = int64_t(prompt.size());
  st.prompt_seconds = seconds_since(t0);
  history.insert(history.end(), prompt.begin(), prompt.end());

  sampling::Sampler sampler(params);
  t0 = std::chrono::steady_clock::now();
  for (int32_t i = 0; o.n_predict < 0 || i < o.n_predict; ++i) {
    if (hooks.stop && hooks.stop()) {
      st.stop = StopReason::kStopped;
      break;
    }
    const int32_t id = session.next_token(sampler, history);
    ++st.gen_tokens;
    history.push_back(id);
    if (!o.ignore_eos && hooks.is_eog && hooks.is_eog(id)) {
      st.stop = StopReason::kEndOfGeneration;
      break;
    }
    if (hooks.on_token) hooks.on_token(id);
    if (o.n_predict >= 0 && i + 1 == o.n_predict) break;
    if (session.n_past() >= session.n_ctx()) {
      st.stop = StopReason::kContextFull;
      break;
    }
    DF_TRY(session.eval(std::span<const int32_t>(&id, 1)));
    ++st.decode_evals;
  }
  st.gen_seconds = seconds_since(t0);
  return st;
}

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return uint64_t(ru.ru_maxrss) * 1024;
}

}  // namespace df::engine
