// `diskformer serve`: an OpenAI-compatible HTTP server over one engine::Model and a chat page.
//
//   POST /v1/chat/completions   messages rendered with the model's chat template; stream: server-sent events
//   POST /v1/completions        a prompt (text or token ids)
//   GET  /v1/models             the one model served
//   GET  /health                {"status": "ok", ...}; needs no API key
//   GET  /metrics               Prometheus text: requests, tokens, tok/s, queue, memory, cache hit rates, bytes
//   GET  /                      the chat page (files embedded in the binary)
//
// Requests are served by `slots` engine sessions (server/scheduler.h); every API route needs
// "Authorization: Bearer KEY" where api_key is set.
//
//   DF_ASSIGN(auto server, df::server::Server::create(*model, {.port = 0}));
//   std::thread t([&] { (void)server->run(); });   // server->port() is bound already
//   ...
//   server->stop();
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "diskformer/engine/generate.h"
#include "diskformer/engine/model.h"
#include "diskformer/util/result.h"

namespace df::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (port() says which)
  std::string api_key;              // empty: no key needed
  uint32_t slots = 1;               // requests generated at once, each with its own KV cache
  uint32_t max_queue = 64;          // requests waiting for a slot; beyond, 503
  std::string model_name;           // the id /v1/models reports (and responses echo where a request names none)
  std::string chat_template;        // Jinja source; empty: the model's, else ChatML
  std::string chat_template_name = "template";
  // What a request does not say: max_tokens (n_predict; -1 until end of generation or a full context), sampling,
  // ignore_eos. A request without a seed draws a random one unless the server was given --seed.
  engine::GenerateOptions defaults{.n_predict = -1};
  bool fixed_seed = false;
  uint64_t max_body_bytes = 2u << 20;
  std::chrono::milliseconds request_timeout{30000};  // to receive a request's line, headers and body
  std::chrono::milliseconds idle_timeout{5000};      // a keep-alive connection between requests
  int http_threads = 0;                              // 0: 8 + 2 x slots
  bool log_requests = true;                          // one line on stderr per response
};

class Server {
 public:
  // Binds the address (errors: it is taken, or not an address of this machine), makes the slots' sessions and
  // parses the chat template (errors name them).
  static Result<std::unique_ptr<Server>> create(engine::Model& model, const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  // Serves until stop(); an error where the listening socket failed.
  Status run();
  // Ends the generations in progress (their clients get an error saying so), lets their responses finish, then
  // stops accepting and closes idle connections; run() returns. Thread-safe, idempotent.
  void stop();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace df::server
