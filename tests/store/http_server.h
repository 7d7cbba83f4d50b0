// A real nginx on loopback for the URL-source tests (started with a generated config on a free port, serving a
// temporary root), a proxy that cuts every connection after a number of response bytes, and a bare server for what
// nginx will not do (no validators at all, headers and then silence).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace df::test {

inline int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

inline bool port_answers(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

inline std::optional<std::string> find_nginx() {
  for (const char* p : {"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"})
    if (::access(p, X_OK) == 0) return std::string(p);
  return std::nullopt;
}

// nginx serving `prefix/root` on a free loopback port. /slow/... is rate-limited (to kill it mid-transfer);
// /bad400/... answers 400 to every Range request except the one-byte probe `bytes=0-0`; /noetag/... sends no
// ETag (If-Range then uses Last-Modified); /auth/... asks for the basic-auth login kUser:kPassword; /private/...
// answers 401 to a request without the header "Authorization: Bearer kToken" (a gated Hugging Face repository).
class Nginx {
 public:
  static constexpr const char* kUser = "reader";
  static constexpr const char* kPassword = "s3cret-Pa55";
  static constexpr const char* kToken = "hf_0123456789abcdefghijklmnopqrstuvwxyzAB";

  Nginx(std::string binary, std::filesystem::path prefix) : binary_(std::move(binary)), prefix_(std::move(prefix)) {
    std::filesystem::create_directories(prefix_ / "root" / "auth");
    std::filesystem::create_directories(prefix_ / "root" / "slow");
    std::filesystem::create_directories(prefix_ / "root" / "bad400");
    std::filesystem::create_directories(prefix_ / "root" / "noetag");
    std::filesystem::create_directories(prefix_ / "root" / "private");
    port_ = free_port();
  }
  ~Nginx() { stop(SIGKILL); }

  std::filesystem::path root() const { return prefix_ / "root"; }
  int port() const { return port_; }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + "/" + path; }

  // Returns "" once it answers, or why it did not start.
  std::string start() {
    std::string p = prefix_.string();
    std::ofstream(prefix_ / "htpasswd") << kUser << ":{PLAIN}" << kPassword << "\n";
    std::ofstream(prefix_ / "nginx.conf") << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << p
        << "/nginx.pid;\nerror_log " << p << "/error.log warn;\nevents { worker_connections 64; }\nhttp {\n"
        << "  access_log off;\n  client_body_temp_path " << p << "/t_body;\n  proxy_temp_path " << p << "/t_proxy;\n"
        << "  fastcgi_temp_path " << p << "/t_fcgi;\n  uwsgi_temp_path " << p << "/t_uwsgi;\n  scgi_temp_path " << p
        << "/t_scgi;\n  map $http_range $not_probe { \"bytes=0-0\" 0; default 1; }\n  server {\n    listen 127.0.0.1:"
        << port_ << ";\n    root " << p << "/root;\n    location /slow/ { limit_rate 2m; }\n"
        << "    location /bad400/ { if ($not_probe) { return 400; } }\n    location /noetag/ { etag off; }\n"
        << "    location /auth/ { auth_basic \"models\"; auth_basic_user_file " << p << "/htpasswd; }\n"
        << "    location /private/ { if ($http_authorization != \"Bearer " << kToken << "\") { return 401; } }\n"
        << "  }\n}\n";
    pid_ = ::fork();
    if (pid_ == 0) {
      std::string log = p + "/stderr.log";
      FILE* f = std::freopen(log.c_str(), "w", stderr);
      (void)f;
      ::execl(binary_.c_str(), binary_.c_str(), "-p", p.c_str(), "-c", (p + "/nginx.conf").c_str(), "-e",
              (p + "/error.log").c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 300; ++i) {
      if (port_answers(port_)) return "";
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        std::ifstream in(prefix_ / "stderr.log");
        std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        return "nginx exited: " + all;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return "nginx did not answer on port " + std::to_string(port_) + " within 3 s";
  }

  void stop(int sig = SIGTERM) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  std::string binary_;
  std::filesystem::path prefix_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// A server on a loopback port that hands each connection to handle() on a thread of its own.
class LoopbackServer {
 public:
  int port() const { return port_; }

 protected:
  LoopbackServer() {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listen_, 16);
    socklen_t len = sizeof a;
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  virtual ~LoopbackServer() {
    stop();
    ::close(listen_);
  }
  // The derived server starts accepting once it is whole, and stops (joining every handler) before its members go.
  void start() { acceptor_ = std::thread([this] { accept_loop(); }); }
  void stop() {
    if (stop_.exchange(true)) return;
    if (acceptor_.joinable()) acceptor_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : conns_) t.join();
  }
  bool stopping() const { return stop_; }
  virtual void handle(int fd) = 0;

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept(listen_, nullptr, nullptr);
      if (c < 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      conns_.emplace_back([this, c] { handle(c); });
    }
  }

  int listen_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
};

// Forwards loopback connections to `upstream_port` and closes each one after `cut_after` bytes have gone from
// the server to the client: a connection dropped mid-transfer, every time.
class CuttingProxy final : public LoopbackServer {
 public:
  CuttingProxy(int upstream_port, uint64_t cut_after) : upstream_(upstream_port), cut_after_(cut_after) { start(); }
  ~CuttingProxy() override { stop(); }
  int cuts() const { return cuts_; }

 private:
  void handle(int client) override {
    int server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(upstream_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(server);
      ::close(client);
      return;
    }
    uint64_t to_client = 0;
    char buf[16384];
    while (!stopping()) {
      pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(p, 2, 20) <= 0) continue;
      if (p[0].revents) {
        ssize_t n = ::recv(client, buf, sizeof buf, 0);
        if (n <= 0 || ::send(server, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
      }
      if (p[1].revents) {
        ssize_t n = ::recv(server, buf, sizeof buf, 0);
        if (n <= 0) break;
        size_t pass = static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(n), cut_after_ - to_client));
        if (pass > 0 && ::send(client, buf, pass, MSG_NOSIGNAL) != static_cast<ssize_t>(pass)) break;
        to_client += pass;
        if (to_client >= cut_after_) {
          ++cuts_;
          break;
        }
      }
    }
    ::close(server);
    ::close(client);
  }

  int upstream_;
  uint64_t cut_after_;
  std::atomic<int> cuts_{0};
};

// One file by Range requests over HTTP/1.1, one request per connection, and none of the validators nginx always
// sends: no ETag, no Last-Modified, so a file swapped for another of the same size shows only in its bytes. With
// stall(true), every request but the one-byte probe gets its headers and then nothing, until the server stops.
class BareHttp final : public LoopbackServer {
 public:
  explicit BareHttp(std::filesystem::path file) : file_(std::move(file)) { start(); }
  ~BareHttp() override { stop(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()) + "/" + file_.filename().string(); }
  void stall(bool on) { stall_ = on; }
  int stalled() const { return stalled_; }  // requests answered with headers and then nothing

 private:
  bool send_all(int c, const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
      ssize_t n = ::send(c, s.data() + done, s.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  void handle(int c) override {
    std::string request;
    char buf[4096];
    while (!stopping() && request.find("\r\n\r\n") == std::string::npos) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) break;
      request.append(buf, static_cast<size_t>(n));
    }
    std::ifstream in(file_, std::ios::binary);
    std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const uint64_t size = body.size();
    uint64_t first = 0, last = size - 1;
    bool ranged = false;
    if (size_t r = request.find("Range: bytes="); r != std::string::npos) {
      unsigned long long a = 0, b = 0;
      if (std::sscanf(request.c_str() + r, "Range: bytes=%llu-%llu", &a, &b) == 2) {
        first = a;
        last = std::min<uint64_t>(b, size - 1);
        ranged = true;
      }
    }
    std::string head = ranged ? "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes " + std::to_string(first) + "-" +
                                    std::to_string(last) + "/" + std::to_string(size) + "\r\n"
                              : std::string("HTTP/1.1 200 OK\r\n");
    head += "Content-Length: " + std::to_string(last - first + 1) + "\r\nConnection: close\r\n\r\n";
    const bool probe = ranged && first == 0 && last == 0;
    if (send_all(c, head)) {
      if (stall_ && !probe) {
        ++stalled_;
        while (!stopping()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } else {
        send_all(c, body.substr(first, last - first + 1));
      }
    }
    ::close(c);
  }

  std::filesystem::path file_;
  std::atomic<bool> stall_{false};
  std::atomic<int> stalled_{0};
};

}  // namespace df::test
