// A bar on stderr while a model's weights are read at open, where stderr is a terminal and the command is not quiet
// (nothing otherwise: logs and pipes get only the "opened in" line). Redrawn at each whole percent, erased when the
// open returns.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace df::cli {

class LoadProgress {
 public:
  LoadProgress(std::string command, bool enabled) : command_(std::move(command)), enabled_(enabled) {}
  ~LoadProgress() { finish(); }
  LoadProgress(const LoadProgress&) = delete;
  LoadProgress& operator=(const LoadProgress&) = delete;

  // For engine::ModelOptions::progress; nullptr when disabled.
  std::function<void(uint64_t done, uint64_t total)> callback();
  void finish();  // erases the bar if one was drawn

 private:
  void draw(uint64_t done, uint64_t total);
  std::string command_;
  bool enabled_;
  bool drawn_ = false;
  int last_percent_ = -1;
};

// Whether a load bar belongs on this stderr: a terminal, and not --quiet.
bool progress_wanted(bool quiet);

}  // namespace df::cli
