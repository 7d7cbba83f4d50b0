#include "cli/load_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "diskformer/util/size.h"

namespace df::cli {

bool progress_wanted(bool quiet) { return !quiet && ::isatty(STDERR_FILENO) == 1; }

std::function<void(uint64_t, uint64_t)> LoadProgress::callback() {
  if (!enabled_) return nullptr;
  return [this](uint64_t done, uint64_t total) { draw(done, total); };
}

void LoadProgress::draw(uint64_t done, uint64_t total) {
  // The total is open's estimate: a load that passes it shows 100% until it ends.
  const int pct = total ? int(std::min<uint64_t>(100, done * 100 / total)) : 100;
  if (pct == last_percent_) return;
  last_percent_ = pct;
  constexpr int kWidth = 30;
  std::string bar(size_t(pct * kWidth / 100), '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\rdiskformer %s: loading [%s] %s / %s %3d%% ", command_.c_str(), bar.c_str(),
               format_size(std::min(done, total)).c_str(), format_size(total).c_str(), pct);
  std::fflush(stderr);
  drawn_ = true;
}

void LoadProgress::finish() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);  // back to the line's start, and the line cleared
  std::fflush(stderr);
  drawn_ = false;
  last_percent_ = -1;
}

}  // namespace df::cli
