#include "cli/partial_file.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace df::cli {

namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

// What the handler reads: the process-wide state a signal needs (one guard at a time; the commands write one file).
char g_partial[PATH_MAX];
volatile sig_atomic_t g_armed = 0;
struct sigaction g_previous[sizeof kSignals / sizeof kSignals[0]];

// Only async-signal-safe calls: unlink, then the default action again, so the process ends by the same signal
// (a shell sees 130 for SIGINT) rather than by an exit code that hides it.
void on_signal(int sig) {
  if (g_armed) ::unlink(g_partial);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

RemoveOnSignal::RemoveOnSignal(const std::string& partial_path) {
  if (partial_path.size() >= sizeof g_partial) return;  // not a path the writers could create either
  std::memcpy(g_partial, partial_path.c_str(), partial_path.size() + 1);
  g_armed = 1;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; ++i) {
    ::sigaction(kSignals[i], nullptr, &g_previous[i]);
    if (g_previous[i].sa_handler == SIG_IGN) continue;  // started ignoring it (nohup): keep it ignored
    ::sigaction(kSignals[i], &sa, nullptr);
  }
}

RemoveOnSignal::~RemoveOnSignal() {
  if (!g_armed) return;
  for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  g_armed = 0;
}

}  // namespace df::cli
