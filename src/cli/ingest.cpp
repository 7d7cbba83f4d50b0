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
#include "cli/fetch.h"
#include "cli/progress.h"
#include "diskformer/store/ingest.h"
#include "diskformer/util/size.h"

namespace df::cli {

int cmd_ingest(int argc, char** argv) {
  Args args("ingest", "-m MODEL.gguf|URL|-hf ORG/REPO[:QUANT] --store DIR [options]");
  args.option("-m,--model", "PATH|URL", "the GGUF to repack (or the first part of a split one): a file, or an http(s) "
              "URL read with Range requests straight into the store");
  add_fetch_options(args);
  args.option("--store", "DIR", "the store directory to write (created where missing)");
  args.flag("--force", "replace a store or an interrupted ingest of another source or layout in DIR");
  args.option("--limit-rate", "SIZE", "read at most SIZE bytes per second from the source (default: no limit)");
  args.option("--checkpoint-every", "SIZE", "bytes between durable checkpoints (default 64M)");
  args.option("--timeout", "SECONDS", "give up on a URL from which nothing has come for this long, across retries "
              "(default 120)");
  args.flag("--json", "print a JSON summary line on stdout");
  args.flag("--quiet", "no progress and no notes on stderr");
  if (!args.parse(argc, argv)) return args.exit_code();
  auto dir = args.get("--store");
  if (!args.has("--model") && !args.has("--hf-repo")) return args.usage_error("-m/--model (or -hf) is required");
  if (!dir) return args.usage_error("--store is required");
  // -hf is fetched into the cache (checked against the repository's sha256) and ingested from there; a URL given
  // to -m is read straight into the store.
  auto model = fetched_model(args, /*fetch_urls=*/false);
  if (!model) return args.exit_code() ? args.exit_code() : 1;
  auto rate = args.get_size("--limit-rate");
  auto every = args.get_size("--checkpoint-every");
  if (!rate || !every) return args.exit_code();
  if (every->has_value() && **every == 0) return args.usage_error("--checkpoint-every must be at least 1 byte");
  auto timeout = args.get_double("--timeout", store::HttpOptions{}.timeout_s, 0.001, 1e9);
  if (!timeout) return args.exit_code();

  // A file size limit (ulimit -f) must end in an error message, not a signal.
  std::signal(SIGXFSZ, SIG_IGN);

  bool quiet = args.has("--quiet");
  ProgressPrinter printer(::isatty(STDERR_FILENO) == 1, "ingest");
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
    o.on_progress = [&](const store::IngestProgress& p) {
      printer.update(p.done, p.total, p.this_run, p.seconds, p.finished);
    };
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
