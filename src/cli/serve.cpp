// diskformer serve -m MODEL [--host H] [--port P] [--api-key KEY] [--parallel N] [...]: the OpenAI-compatible
// server and its chat page. SIGTERM or SIGINT stops it: generations in progress end with an error saying so, their
// responses are finished, then the process exits 0 (the server writes no files, so nothing is left half-written).
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/compute_backend.h"
#include "cli/engine_args.h"
#include "cli/text_file.h"
#include "diskformer/server/server.h"

namespace df::cli {

int cmd_serve(int argc, char** argv) {
  // Before any thread exists, so that every thread inherits the mask and the signals wait for signalfd.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that goes away is an error of its write, not the end of the server

  Args args("serve",
            "-m MODEL|-hf ORG/REPO[:QUANT]|--store DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--parallel N] [-c N] [...]");
  add_model_options(args);
  add_sampling_options(args, -1);
  args.option("--host", "ADDR", "address to listen on (default 127.0.0.1: this machine only)");
  args.option("--port", "N", "port to listen on (default 8080; 0: any free port, printed)");
  args.option("--api-key", "KEY", "every API route needs Authorization: Bearer KEY (/health and the page do not)");
  args.option("--api-key-file", "PATH", "the API key from the first line of a file (kept out of ps)");
  args.option("-np,--parallel", "N", "requests generated at once, each slot with its own KV cache of -c (default 1)");
  args.option("--alias", "NAME", "the model's id in /v1/models and responses (default: the file's name)");
  args.option("--chat-template-file", "PATH", "Jinja chat template instead of the model's (ChatML where it has none)");
  args.option("--timeout", "SECONDS", "time a client has to send a request's headers and body (default 30)");
  args.option("--max-body", "SIZE", "largest request body (default 2M)");
  args.option("--max-queue", "N", "requests waiting for a slot before more are refused with 503 (default 64)");
  args.option("--http-threads", "N", "connections served at once (default 8 + 2 x --parallel)");
  args.flag("--quiet", "no logs but the line saying where it listens");
  if (!args.parse(argc, argv)) return args.exit_code();

  auto mo = model_options(args, /*allow_cuda=*/true);
  if (!mo) return args.exit_code();
  const auto path = model_path(args);
  if (!path) return args.exit_code() ? args.exit_code() : 1;
  auto go = generate_options(args, -1);
  if (!go) return args.exit_code();
  const auto port = args.get_int("--port", 8080, 0, 65535);
  const auto slots = args.get_int("--parallel", 1, 1, 256);
  const auto timeout = args.get_int("--timeout", 30, 1, 86400);
  const auto max_queue = args.get_int("--max-queue", 64, 0, 1 << 20);
  const auto http_threads = args.get_int("--http-threads", 0, 1, 4096);
  const auto max_body = args.get_size("--max-body");
  if (!port || !slots || !timeout || !max_queue || !http_threads || !max_body) return args.exit_code();
  const bool quiet = args.has("--quiet");

  server::ServerOptions so;
  so.host = args.get_or("--host", "127.0.0.1");
  so.port = int(*port);
  so.slots = uint32_t(*slots);
  so.max_queue = uint32_t(*max_queue);
  so.http_threads = int(*http_threads);
  so.request_timeout = std::chrono::seconds(*timeout);
  if (*max_body) so.max_body_bytes = **max_body;
  so.defaults = *go;
  so.fixed_seed = args.has("--seed") && args.get_or("--seed", "-1") != "-1";
  so.log_requests = !quiet;
  if (auto key = args.get("--api-key")) so.api_key = *key;
  if (auto f = args.get("--api-key-file")) {
    auto text = read_text_file(*f);
    if (!text) {
      std::fprintf(stderr, "diskformer serve: --api-key-file %s\n", text.error().message.c_str());
      return 1;
    }
    so.api_key = text->substr(0, text->find_first_of("\r\n"));
    if (so.api_key.empty()) {
      std::fprintf(stderr, "diskformer serve: --api-key-file %s: the first line is empty\n", f->c_str());
      return 1;
    }
  }
  if (auto f = args.get("--chat-template-file")) {
    auto text = read_text_file(*f);
    if (!text) {
      std::fprintf(stderr, "diskformer serve: --chat-template-file %s\n", text.error().message.c_str());
      return 1;
    }
    so.chat_template = std::move(*text);
    so.chat_template_name = *f;
  }
  so.model_name = args.get_or("--alias", std::filesystem::path(*path).filename().replace_extension().string());

  const auto backend = choose_backend("serve", args);
  if (!backend) return 1;
  mo->backend = *backend;
  mo->sessions = so.slots;  // each slot's session has its own KV cache: the budgets hold them all
  auto model = open_model("serve", *path, *mo, quiet, /*cpu_fallback=*/!args.has("--backend"));
  if (!model) return 1;
  auto server = server::Server::create(*model, so);
  if (!server.ok()) {
    std::fprintf(stderr, "diskformer serve: %s\n", server.error().message.c_str());
    return 1;
  }
  const bool loopback = so.host == "127.0.0.1" || so.host == "localhost" || so.host == "::1";
  if (!loopback && so.api_key.empty())
    std::fprintf(stderr, "diskformer serve: warning: %s is reachable from other machines and no --api-key is set\n",
                 so.host.c_str());
  const std::string shown = so.host.find(':') != std::string::npos ? "[" + so.host + "]" : so.host;
  std::fprintf(stderr, "diskformer serve: listening on http://%s:%d (model %s, %u slot%s of %u tokens%s)\n",
               shown.c_str(), (*server)->port(), so.model_name.c_str(), so.slots, so.slots == 1 ? "" : "s",
               model->n_ctx(), so.api_key.empty() ? "" : ", API key required");
  std::fflush(stderr);

  const int sig_fd = signalfd(-1, &stop_signals, SFD_CLOEXEC);
  const int done_fd = eventfd(0, EFD_CLOEXEC);
  Status served;
  std::thread t([&] {
    served = (*server)->run();
    const uint64_t one = 1;
    (void)!write(done_fd, &one, sizeof one);
  });
  pollfd p[2] = {{sig_fd, POLLIN, 0}, {done_fd, POLLIN, 0}};
  while (poll(p, 2, -1) < 0) {
  }
  if (p[0].revents & POLLIN) {
    signalfd_siginfo si{};
    (void)!read(sig_fd, &si, sizeof si);
    if (!quiet) std::fprintf(stderr, "diskformer serve: %s: stopping\n", strsignal(int(si.ssi_signo)));
  }
  (*server)->stop();
  t.join();
  close(sig_fd);
  close(done_fd);
  if (!served.ok()) {
    std::fprintf(stderr, "diskformer serve: %s\n", served.error().message.c_str());
    return 1;
  }
  if (!quiet) std::fprintf(stderr, "diskformer serve: stopped\n");
  return 0;
}

}  // namespace df::cli
