#include "cli/progress.h"

#include <cstdio>

#include "diskformer/util/size.h"

namespace df::cli {

namespace {

std::string clock_text(double seconds) {
  if (seconds < 0 || seconds > 359999) return "--:--";
  auto s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

void ProgressPrinter::update(uint64_t done, uint64_t total, uint64_t this_run, double seconds, bool finished,
                             const std::string& name) {
  if (name != name_) {
    break_line();
    name_ = name;
    last_tenth_ = -1;
  }
  const double mbps = seconds > 0 ? double(this_run) / 1e6 / seconds : 0;
  const double left = double(total - done);
  const double eta = mbps > 0 ? left / 1e6 / mbps : -1;
  const int pct = total ? static_cast<int>(100.0 * double(done) / double(total)) : 100;
  const std::string what = name.empty() ? "" : name + "  ";
  if (tty_) {
    auto now = std::chrono::steady_clock::now();
    if (!finished && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    int fill = pct * kWidth / 100;
    std::string bar(static_cast<size_t>(fill), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r%s[%s] %s / %s  %3d%%  %.1f MB/s  ETA %s   ", what.c_str(), bar.c_str(),
                 format_size(done).c_str(), format_size(total).c_str(), pct, mbps, clock_text(eta).c_str());
    if (finished) std::fprintf(stderr, "\n");
    drawn_ = !finished;
  } else if (pct / 10 > last_tenth_ || finished) {
    last_tenth_ = pct / 10;
    std::fprintf(stderr, "%s: %s%3d%%  %s of %s  %.1f MB/s  ETA %s\n", label_.c_str(), what.c_str(), pct,
                 format_size(done).c_str(), format_size(total).c_str(), mbps, clock_text(finished ? 0 : eta).c_str());
  }
}

void ProgressPrinter::break_line() {
  if (tty_ && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace df::cli
