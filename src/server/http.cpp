#include "server/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace df::server {

namespace {

// Set on every request by the server (a client's header of that name is dropped first), so that a handler finds
// its connection.
constexpr const char* kConnectionHeader = "X-Diskformer-Connection";

using Clock = std::chrono::steady_clock;

enum class Wait { kReady, kTimeout, kStopped, kError };

// Waits until fd has one of `events`, the stop eventfd fires, or `until` passes.
Wait wait_fd(int fd, short events, int stop_fd, Clock::time_point until) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    pollfd p[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    const int r = ::poll(p, stop_fd >= 0 ? 2 : 1, int(std::max<int64_t>(0, left)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Wait::kError;
    if (stop_fd >= 0 && (p[1].revents & POLLIN)) return Wait::kStopped;
    if (r == 0) return Wait::kTimeout;
    if (p[0].revents & (events | POLLHUP | POLLERR)) return Wait::kReady;
  }
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  const int r = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                     : ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  ip.clear();
  port = 0;
  if (r != 0) return;
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    port = ntohs(a->sin6_port);
  }
  ip = buf;
}

// One connection's byte stream: reads buffered across the requests of a keep-alive connection, each request bounded
// by a deadline and a byte budget set when it starts.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(Connection& c, int stop_fd, const HttpLimits& limits) : c_(c), stop_fd_(stop_fd), limits_(limits) {}

  // Waits for the first byte of the next request (false: idle too long, closed, or shutting down).
  bool wait_request() {
    if (off_ < end_) return true;
    return wait_fd(c_.fd(), POLLIN, stop_fd_, Clock::now() + limits_.idle_timeout) == Wait::kReady;
  }
  void begin_request() {
    deadline_ = Clock::now() + limits_.request_timeout;
    budget_ = limits_.max_request_bytes;
  }
  // A read ran past the deadline or the budget: the rest of the request is unread.
  bool failed() const { return failed_; }

  bool is_readable() const override {
    return off_ < end_ || wait_fd(c_.fd(), POLLIN, stop_fd_, deadline_) == Wait::kReady;
  }
  bool is_writable() const override {
    return wait_fd(c_.fd(), POLLOUT, -1, Clock::now() + limits_.write_timeout) == Wait::kReady && !c_.client_gone();
  }

  ssize_t read(char* ptr, size_t size) override {
    if (off_ == end_) {
      if (budget_ == 0) {
        c_.set_over_limit();
        return fail();
      }
      if (wait_fd(c_.fd(), POLLIN, stop_fd_, deadline_) != Wait::kReady) return fail();
      ssize_t n;
      do {
        n = ::recv(c_.fd(), buf_, size_t(std::min<uint64_t>(sizeof buf_, budget_)), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n < 0 ? fail() : 0;
      budget_ -= uint64_t(n);
      off_ = 0;
      end_ = size_t(n);
    }
    const size_t n = std::min(size, end_ - off_);
    std::memcpy(ptr, buf_ + off_, n);
    off_ += n;
    return ssize_t(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = ::send(c_.fd(), ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(c_.fd(), true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(c_.fd(), false, ip, port); }
  socket_t socket() const override { return c_.fd(); }

 private:
  ssize_t fail() {
    failed_ = true;
    return -1;
  }

  Connection& c_;
  int stop_fd_;
  const HttpLimits& limits_;
  Clock::time_point deadline_{};
  uint64_t budget_ = 0;
  bool failed_ = false;
  char buf_[4096];
  size_t off_ = 0, end_ = 0;
};

// Closes a connection whose client may still be sending (a refused body): our side is shut for writing first and
// what arrives is read and dropped for a moment, so that the kernel does not answer the unread bytes with a reset
// that could destroy the response before the client reads it.
void lingering_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto until = Clock::now() + std::chrono::seconds(1);
  char buf[4096];
  uint64_t dropped = 0;
  while (dropped < (8u << 20) && wait_fd(fd, POLLIN, -1, until) == Wait::kReady) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    dropped += uint64_t(n);
  }
  ::close(fd);
}

}  // namespace

bool Connection::client_gone() const {
  pollfd p{fd_, POLLRDHUP, 0};
  const int r = ::poll(&p, 1, 0);
  return r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

HttpServer::HttpServer(const HttpLimits& limits) : limits_(limits) {
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int threads = std::max(1, limits_.threads);
  new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  set_keep_alive_max_count(size_t(std::max(1, limits_.keep_alive_requests)));
}

HttpServer::~HttpServer() {
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

int HttpServer::bind(const std::string& host, int port) {
  int bound = port;
  if (port == 0) {
    bound = bind_to_any_port(host);
  } else if (!bind_to_port(host, port)) {
    bound = -1;
  }
  // cpp-httplib listens with a backlog of 5, which drops the connections of a burst of clients for a second
  // (SYN retries); listen() again only raises it.
  if (bound > 0) ::listen(svr_sock_, 128);
  return bound;
}

bool HttpServer::serve() { return listen_after_bind(); }

void HttpServer::shutdown() {
  const uint64_t one = 1;
  if (stop_fd_ >= 0) (void)!::write(stop_fd_, &one, sizeof one);
  stop();
}

Connection* HttpServer::connection(const httplib::Request& req) {
  const std::string v = req.get_header_value(kConnectionHeader);
  if (v.empty()) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(std::stoull(v));
  return it == connections_.end() ? nullptr : it->second;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  Connection conn(sock);
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    connections_[id] = &conn;
  }
  DeadlineStream strm(conn, stop_fd_, limits_);
  const std::string id_text = std::to_string(id);
  bool ok = false, unread = false;  // unread: the client may still be sending what was not read
  for (int i = 0; i < limits_.keep_alive_requests && svr_sock_ != INVALID_SOCKET; ++i) {
    if (!strm.wait_request()) break;
    strm.begin_request();
    bool connection_closed = false, parsed = false;
    const bool last = i + 1 == limits_.keep_alive_requests;
    ok = process_request(strm, last, connection_closed, [&](httplib::Request& req) {
      parsed = true;
      req.headers.erase(kConnectionHeader);
      req.set_header(kConnectionHeader, id_text);
    });
    // A request whose line or headers did not parse leaves the stream at an unknown place: the connection ends.
    unread = (ok && !parsed) || conn.closing() || strm.failed();
    if (!ok || unread || connection_closed) break;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    connections_.erase(id);
  }
  if (unread) {
    lingering_close(sock);
  } else {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }
  return ok;
}

}  // namespace df::server
