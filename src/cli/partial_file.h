// The OUT.partial that synth and convert write before renaming it into place, removed when SIGINT, SIGTERM or SIGHUP
// ends the command: the writers remove it on every error they return, but a signal ends the process without
// unwinding, and a half-written file of gigabytes would be left behind.
#pragma once

#include <string>

namespace df::cli {

class RemoveOnSignal {
 public:
  // Installs the handlers; the path is kept in a fixed buffer (a handler may not allocate).
  explicit RemoveOnSignal(const std::string& partial_path);
  ~RemoveOnSignal();  // restores the handlers that were there before
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;
};

}  // namespace df::cli
