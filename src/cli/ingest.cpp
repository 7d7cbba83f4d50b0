// diskformer ingest -m MODEL.gguf|URL --store DIR: repack a model into a streaming store; resumable.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "diskformer/store/ingest.h"
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

// A bar redrawn in place on a terminal; plain lines at every tenth otherwise (logs, CI).
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool tty) : tty_(tty) {}

  void update(const store::IngestProgress& p) {
    double mbps = p.seconds > 0 ? double(p.this_run) / 1e6 / p.seconds : 0;
    double left = p.total - p.done;
    double eta = mbps > 0 ? left / 1e6 / mbps : -1;
    int pct = p.total ? static_cast<int>(100.0 * double(p.done) / double(p.total)) : 100;
    if (tty_) {
      auto now = std::chrono::steady_clock::now();
      if (!p.finished && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      constexpr int kWidth = 30;
      int fill = pct * kWidth / 100;
      std::string bar(static_cast<size_t>(fill), '#');
      bar.resize(kWidth, '.');
      std::fprintf(stderr, "\r[%s] %s / %s  %3d%%  %.1f MB/s  ETA %s   ", bar.c_str(), format_size(p.done).c_str(),
                   format_size(p.total).c_str(), pct, mbps, clock_text(eta).c_str());
      if (p.finished) std::fprintf(stderr, "\n");
      drawn_ = true;
    } else if (pct / 10 > last_tenth_ || p.finished) {
      last_tenth_ = pct / 10;
      std::fprintf(stderr, "ingest: %3d%%  %s of %s  %.1f MB/s  ETA %s\n", pct, format_size(p.done).c_str(),
                   format_size(p.total).c_str(), mbps, clock_text(p.finished ? 0 : eta).c_str());
    }
  }
  // Ends a half-drawn bar before another line is printed.
  void break_line() {
    if (tty_ && drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  bool tty_;
  bool drawn_ = false;
  int last_tenth_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace

int cmd_ingest(int argc, char** argv) {
  Args args("ingest", "-m MODEL.gguf|URL --store DIR [options]");
  args.option("-m,--model", "PATH|URL", "the GGUF to repack: a file or an http(s) URL (read with Range requests)");
  args.option("--store", "DIR", "the store directory to write (created where missing)");
  args.flag("--force", "replace a store or an interrupted ingest of another source or layout in DIR");
  args.option("--limit-rate", "SIZE", "read at most SIZE bytes per second from the source (default: no limit)");
  args.option("--checkpoint-every", "SIZE", "bytes between durable checkpoints (default 64M)");
  args.option("--timeout", "SECONDS", "give up on a URL from which nothing has come for this long, across retries "
              "(default 120)");
  args.flag("--json", "print a JSON summary line on stdout");
  args.flag("--quiet", "no progress and no notes on stderr");
  if (!args.parse(argc, argv)) return args.exit_code();
  auto model = args.get("--model");
  auto dir = args.get("--store");
  if (!model) return args.usage_error("-m/--model is required");
  if (!dir) return args.usage_error("--store is required");
  auto rate = args.get_size("--limit-rate");
  auto every = args.get_size("--checkpoint-every");
  if (!rate || !every) return args.exit_code();
  if (every->has_value() && **every == 0) return args.usage_error("--checkpoint-every must be at least 1 byte");
  auto timeout = args.get_double("--timeout", store::HttpOptions{}.timeout_s, 0.001, 1e9);
  if (!timeout) return args.exit_code();

  // A file size limit (ulimit -f) must end in an error message, not a signal.
  std::signal(SIGXFSZ, SIG_IGN);

  bool quiet = args.has("--quiet");
  ProgressPrinter printer(::isatty(STDERR_FILENO) == 1);
  store::IngestOptions o;
  o.source = *model;
  o.dir = *dir;
  o.force = args.has("--force");
  o.limit_rate = rate->value_or(0);
  o.checkpoint_every = every->value_or(o.checkpoint_every);
  o.http.timeout_s = *timeout;
  // A login kept out of the command line (and so out of ps and shell history): USER:PASSWORD, or a netrc.
  if (const char* auth = std::getenv("DISKFORMER_HTTP_AUTH")) o.http.auth = auth;
  if (const char* netrc = std::getenv("NETRC")) o.http.netrc_file = netrc;
  if (!quiet) {
    o.on_progress = [&](const store::IngestProgress& p) { printer.update(p); };
    o.on_note = [&](const std::string& s) {
      printer.break_line();
      std::fprintf(stderr, "ingest: %s\n", s.c_str());
    };
    o.http.on_retry = o.on_note;
  }
  auto r = store::ingest(o);
  if (!quiet) printer.break_line();
  if (!r.ok()) {
    std::fprintf(stderr, "diskformer ingest: %s\n", r.error().message.c_str());
    return 1;
  }
  double mbps = r->seconds > 0 ? double(r->copied) / 1e6 / r->seconds : 0;
  if (!quiet && !r->up_to_date)
    std::fprintf(stderr, "ingest: wrote %s (%llu records, %s) in %.2f s, %.1f MB/s%s\n", o.dir.c_str(),
                 static_cast<unsigned long long>(r->records), format_size(r->data_bytes).c_str(), r->seconds, mbps,
                 r->resumed ? " (resumed)" : "");
  if (args.has("--json")) {
    nlohmann::json j{{"store", o.dir},
                     {"source", store::redact_url(o.source)},
                     {"data_bytes", r->data_bytes},
                     {"records", r->records},
                     {"copied_bytes", r->copied},
                     {"resumed", r->resumed},
                     {"resumed_at", r->resumed_at},
                     {"restarts", r->restarts},
                     {"up_to_date", r->up_to_date},
                     {"seconds", r->seconds},
                     {"MBps", mbps}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace df::cli
