#include "cli/interrupt.h"

#include <signal.h>
#include <unistd.h>

namespace df::cli {

namespace {

// The handler's state: a signal flag and whether a generation is there to stop it (process-wide by nature).
volatile sig_atomic_t g_generating = 0;
volatile sig_atomic_t g_requested = 0;
struct sigaction g_previous;

// Async-signal-safe only: a flag, or write and _exit. stdout is flushed after every token and after every reply, so
// _exit loses no generated text.
void on_sigint(int) {
  if (g_generating && !g_requested) {
    g_requested = 1;
    return;
  }
  const char nl = '\n';
  (void)!::write(STDERR_FILENO, &nl, 1);
  ::_exit(130);
}

}  // namespace

Interrupt::Interrupt() {
  g_generating = 0;
  g_requested = 0;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a write to stdout that the signal interrupts goes on
  ::sigaction(SIGINT, nullptr, &g_previous);
  if (g_previous.sa_handler == SIG_IGN) return;  // started ignoring it (a background job): keep it ignored
  ::sigaction(SIGINT, &sa, nullptr);
}

Interrupt::~Interrupt() {
  ::sigaction(SIGINT, &g_previous, nullptr);
  g_generating = 0;
}

void Interrupt::set_generating(bool on) { g_generating = on ? 1 : 0; }
bool Interrupt::requested() const { return g_requested != 0; }
void Interrupt::clear() { g_requested = 0; }

}  // namespace df::cli
