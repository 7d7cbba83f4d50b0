#include "cli/fetch.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "cli/progress.h"
#include "diskformer/store/hub.h"
#include "diskformer/util/size.h"

namespace df::cli {

void add_fetch_options(Args& args) {
  args.option("-hf,--hf-repo", "ORG/REPO[:QUANT]", "fetch the model from Hugging Face into the cache (default quant "
              "Q4_K_M, then Q8_0, then the first GGUF; endpoint MODEL_ENDPOINT or HF_ENDPOINT, token HF_TOKEN, "
              "cache DISKFORMER_CACHE)");
  args.option("-hff,--hf-file", "FILE", "with -hf: this file of the repository instead of the quant's choice");
}

std::optional<std::string> fetched_model(Args& args, bool fetch_urls) {
  const auto repo = args.get("--hf-repo");
  const auto m = args.get("--model");
  if (args.has("--hf-file") && !repo) {
    args.usage_error("--hf-file needs -hf ORG/REPO");
    return std::nullopt;
  }
  if (repo && m) {
    args.usage_error("give one of -m and -hf");
    return std::nullopt;
  }
  if (!repo && !(m && fetch_urls && store::is_url(*m))) return m;
  if (repo) {
    auto name = store::hub::parse_repo(*repo);
    if (!name.ok()) {
      args.usage_error("-hf: " + name.error().message);
      return std::nullopt;
    }
  }

  const bool quiet = args.has("--quiet");
  auto cache = store::hub::cache_dir_from_env();
  if (!cache.ok()) {
    std::fprintf(stderr, "diskformer: %s\n", cache.error().message.c_str());
    return std::nullopt;
  }
  // A file size limit (ulimit -f) must end in an error message (and a partial file to resume), not a signal.
  std::signal(SIGXFSZ, SIG_IGN);
  ProgressPrinter printer(::isatty(STDERR_FILENO) == 1, "download");
  store::hub::HubOptions o;
  o.endpoint = store::hub::endpoint_from_env();
  o.cache_dir = *cache;
  if (const char* t = std::getenv("HF_TOKEN"); t && *t) o.token = t;
  if (const char* auth = std::getenv("DISKFORMER_HTTP_AUTH")) o.http.auth = auth;
  if (const char* netrc = std::getenv("NETRC")) o.http.netrc_file = netrc;
  if (!quiet) {
    o.on_progress = [&](const store::DownloadProgress& p) {
      printer.update(p.done, p.total, p.this_run, p.seconds, p.finished, p.name);
    };
    o.on_note = [&](const std::string& s) {
      printer.break_line();
      std::fprintf(stderr, "download: %s\n", s.c_str());
    };
    o.http.on_retry = o.on_note;
  }
  auto r = repo ? store::hub::fetch_repo(*repo, args.get_or("--hf-file", ""), o) : store::hub::fetch_url(*m, o);
  printer.break_line();
  if (!r.ok()) {
    std::fprintf(stderr, "diskformer: %s\n", r.error().message.c_str());
    return std::nullopt;
  }
  if (!quiet) {
    const std::string how = r->downloaded ? format_size(r->downloaded) + " fetched" : std::string("in the cache");
    std::fprintf(stderr, "download: %s (%s)\n", r->path.c_str(), how.c_str());
  }
  return r->path;
}

}  // namespace df::cli
