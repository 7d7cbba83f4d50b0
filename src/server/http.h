// The HTTP layer: Debian's cpp-httplib (0.11) for parsing, routing and chunked responses, with its connections
// read through a stream of our own so that a request is bounded in time and size however slowly it arrives.
// cpp-httplib's own socket stream restarts its read timeout at every byte, so a client sending its headers a byte at
// a time (slowloris) would hold a worker thread for ever; here each request's line, headers and body must arrive
// within `request_timeout` and `max_request_bytes`, an idle keep-alive connection is closed after `idle_timeout`,
// a write that cannot proceed for `write_timeout` ends the response, and shutdown() ends idle connections at once.
//
// Handlers reach their connection through connection(req): whether the client is still there (a closed or reset
// socket), and a way to close the connection after the response (a refused body that was not read).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace df::server {

struct HttpLimits {
  std::chrono::milliseconds request_timeout{30000};  // a request's line, headers and body, from its first byte
  std::chrono::milliseconds idle_timeout{5000};      // a keep-alive connection waiting for its next request
  std::chrono::milliseconds write_timeout{30000};    // one write that makes no progress
  uint64_t max_request_bytes = 8u << 20;             // line, headers and body of one request, as read
  int threads = 8;                                    // connections served at once (more wait for a thread)
  int keep_alive_requests = 100;                      // requests on one connection before it is closed
};

// A connection as its handlers see it; lives while the connection is served.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  // The peer closed or reset the connection (it will not read what is still to come).
  bool client_gone() const;
  // The connection ends after this response (its request's body was refused unread).
  void close_after_response() { close_ = true; }
  bool closing() const { return close_; }
  // The request being read went past max_request_bytes (its response says so).
  bool over_limit() const { return over_limit_; }
  void set_over_limit() { over_limit_ = true; }
  int fd() const { return fd_; }

 private:
  int fd_;
  std::atomic<bool> close_{false};
  bool over_limit_ = false;
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const HttpLimits& limits);
  ~HttpServer() override;

  // Binds host:port (port 0: any free port); the port bound, or -1.
  int bind(const std::string& host, int port);
  // Serves until shutdown(); false where the listening socket failed.
  bool serve();
  // Stops accepting, ends idle connections and slow requests now, lets responses in progress finish. Thread-safe.
  void shutdown();

  // The connection a request came on (nullptr only for a request not read by this server).
  Connection* connection(const httplib::Request& req);

 private:
  bool process_and_close_socket(socket_t sock) override;

  HttpLimits limits_;
  int stop_fd_ = -1;  // eventfd: readable once shutdown() ran
  std::mutex mu_;
  std::unordered_map<uint64_t, Connection*> connections_;
  uint64_t next_id_ = 1;
};

}  // namespace df::server
