// A small HTTP/1.1 client over a plain socket to 127.0.0.1, written for the server's tests: it knows nothing of the
// server's HTTP library, so that the tests see the bytes a client sees (status lines, chunked bodies, events as they
// arrive, a connection the server closes). Every read waits at most the socket's timeout, so a test never hangs on a
// silent server.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace df::test {

// A connected socket, closed when it goes.
class Socket {
 public:
  explicit Socket(int port, int timeout_ms = 120000) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    timeout_ms_ = timeout_ms;
    const int one = 1;
    if (fd_ >= 0) ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Socket() { close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send_all(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }
  // Some bytes (appended to buf); 0 at end of stream, -1 on an error or a silent server.
  ssize_t read_some(std::string& buf) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms_) <= 0) return -1;
    char tmp[8192];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n > 0) buf.append(tmp, size_t(n));
    return n;
  }
  // Whether the server has closed the connection (reads what is pending; waits at most wait_ms).
  bool closed_by_peer(int wait_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, wait_ms) <= 0) return false;
    char tmp[4096];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN);
  }

 private:
  int fd_ = -1;
  int timeout_ms_ = 120000;
};

struct HttpResponse {
  int status = -1;  // -1: no response
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
};

inline std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Reads a response's status line and headers from sock (buf keeps what follows them).
inline bool read_head(Socket& sock, std::string& buf, HttpResponse& r) {
  size_t end;
  while ((end = buf.find("\r\n\r\n")) == std::string::npos)
    if (sock.read_some(buf) <= 0) return false;
  const std::string head = buf.substr(0, end);
  buf.erase(0, end + 4);
  size_t line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, line_end);
  if (status_line.size() < 12) return false;
  r.status = std::stoi(status_line.substr(9, 3));
  while (line_end != std::string::npos) {
    const size_t next = head.find("\r\n", line_end + 2);
    const std::string line = head.substr(line_end + 2, next == std::string::npos ? std::string::npos : next - line_end - 2);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      r.headers[lower(line.substr(0, colon))] = line.substr(v);
    }
    line_end = next;
  }
  return true;
}

// Reads a body after read_head: by Content-Length, chunked (on_data sees each chunk as it comes; returning false
// stops reading), or to the end of the stream.
inline bool read_body(Socket& sock, std::string& buf, HttpResponse& r,
                      const std::function<bool(const std::string&)>& on_data = nullptr) {
  if (r.headers.count("transfer-encoding") && lower(r.headers["transfer-encoding"]) == "chunked") {
    for (;;) {
      size_t eol;
      while ((eol = buf.find("\r\n")) == std::string::npos)
        if (sock.read_some(buf) <= 0) return false;
      const size_t n = std::stoul(buf.substr(0, eol), nullptr, 16);
      while (buf.size() < eol + 2 + n + 2)
        if (sock.read_some(buf) <= 0) return false;
      const std::string chunk = buf.substr(eol + 2, n);
      buf.erase(0, eol + 2 + n + 2);
      if (n == 0) return true;
      r.body += chunk;
      if (on_data && !on_data(chunk)) return true;
    }
  }
  if (r.headers.count("content-length")) {
    const size_t n = std::stoul(r.headers["content-length"]);
    while (buf.size() < n)
      if (sock.read_some(buf) <= 0) return false;
    r.body = buf.substr(0, n);
    buf.erase(0, n);
    return true;
  }
  while (sock.read_some(buf) > 0) {
  }
  r.body = buf;
  buf.clear();
  return true;
}

inline std::string request_text(const std::string& method, const std::string& path, const std::string& body,
                                const std::map<std::string, std::string>& headers, bool keep_alive = false) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST") {
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    if (!headers.count("Content-Type")) req += "Content-Type: application/json\r\n";
  }
  if (!keep_alive) req += "Connection: close\r\n";
  return req + "\r\n" + body;
}

inline HttpResponse http(int port, const std::string& method, const std::string& path, const std::string& body = "",
                         const std::map<std::string, std::string>& headers = {}) {
  HttpResponse r;
  Socket sock(port);
  if (!sock.ok() || !sock.send_all(request_text(method, path, body, headers))) return r;
  std::string buf;
  if (read_head(sock, buf, r)) read_body(sock, buf, r);
  return r;
}

inline HttpResponse post_json(int port, const std::string& path, const nlohmann::json& body,
                              const std::map<std::string, std::string>& headers = {}) {
  return http(port, "POST", path, body.dump(), headers);
}

// The data of each server-sent event of a streamed response, in order.
struct Stream {
  int status = -1;
  std::vector<std::string> events;
  std::string body;  // the whole body as received
};

// Posts and reads the event stream; on_event may return false to stop (the connection is then closed at once).
inline Stream post_stream(int port, const std::string& path, const nlohmann::json& body,
                          const std::function<bool(const std::string&)>& on_event = nullptr,
                          const std::map<std::string, std::string>& headers = {}) {
  Stream s;
  Socket sock(port);
  if (!sock.ok() || !sock.send_all(request_text("POST", path, body.dump(), headers))) return s;
  std::string buf, pending;
  HttpResponse r;
  if (!read_head(sock, buf, r)) return s;
  s.status = r.status;
  read_body(sock, buf, r, [&](const std::string& chunk) {
    pending += chunk;
    size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      const std::string ev = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (ev.rfind("data: ", 0) == 0) {
        s.events.push_back(ev.substr(6));
        if (on_event && !on_event(s.events.back())) return false;
      }
    }
    return true;
  });
  s.body = r.body;
  return s;
}

// A counter or gauge of /metrics without labels (UINT64_MAX where it is absent).
inline uint64_t metric(int port, const std::string& name) {
  const std::string body = http(port, "GET", "/metrics").body;
  const size_t at = body.find("\n" + name + " ");
  return at == std::string::npos ? UINT64_MAX : std::stoull(body.substr(at + name.size() + 2));
}

// Asks /metrics until the value reaches `value`, at most `attempts` times (each a request to the server): for what
// the server does after it has answered (a cancellation it notices at its next write).
inline uint64_t metric_reaching(int port, const std::string& name, uint64_t value, int attempts = 2000) {
  uint64_t v = metric(port, name);
  for (int i = 0; i < attempts && v != value; ++i) v = metric(port, name);
  return v;
}

}  // namespace df::test
