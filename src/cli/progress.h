// Progress of a long copy on stderr (ingest, downloads): a bar redrawn in place on a terminal, plain lines at every
// tenth otherwise (logs, CI).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace df::cli {

class ProgressPrinter {
 public:
  // `label` starts every plain line ("ingest", "download").
  ProgressPrinter(bool tty, std::string label) : tty_(tty), label_(std::move(label)) {}

  // `name`, where given, says what is being copied (a file's name); a new name starts a new bar.
  void update(uint64_t done, uint64_t total, uint64_t this_run, double seconds, bool finished,
              const std::string& name = "");
  // Ends a half-drawn bar before another line is printed.
  void break_line();

 private:
  bool tty_;
  std::string label_, name_;
  bool drawn_ = false;
  int last_tenth_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace df::cli
