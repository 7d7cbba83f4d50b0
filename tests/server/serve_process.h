// `diskformer serve` as a child process of a test: started on a free port of 127.0.0.1 (the port is read from the
// line it prints when it listens), its stderr collected, stopped with SIGTERM. Waits are bounded: for the listening
// line, and for the process to end (a pidfd polled with a deadline), so a broken server fails the test instead of
// hanging it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/test_paths.h"

namespace df::test {

class ServeProcess {
 public:
  // Starts the server with these arguments (after "serve --port 0"); ok() says whether it listens.
  explicit ServeProcess(const std::vector<std::string>& args, std::chrono::seconds start_timeout = std::chrono::seconds(120)) {
    int err[2];
    if (::pipe2(err, O_CLOEXEC) != 0) return;
    std::vector<std::string> all = {cli_path().string(), "serve", "--port", "0"};
    all.insert(all.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      const int devnull = ::open("/dev/null", O_RDWR);
      ::dup2(devnull, 0);
      ::dup2(devnull, 1);
      ::dup2(err[1], 2);
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    ::close(err[1]);
    err_fd_ = err[0];
    reader_ = std::thread([this] {
      char buf[4096];
      for (;;) {
        const ssize_t n = ::read(err_fd_, buf, sizeof buf);
        if (n <= 0) break;
        std::lock_guard<std::mutex> lock(mu_);
        err_.append(buf, size_t(n));
        cv_.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu_);
      eof_ = true;
      cv_.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu_);
    const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    std::smatch m;
    cv_.wait_for(lock, start_timeout, [&] { return eof_ || std::regex_search(err_, m, listening); });
    if (std::regex_search(err_, m, listening)) port_ = std::stoi(m[1]);
  }
  ~ServeProcess() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      wait_exit(std::chrono::seconds(30));
    }
    if (reader_.joinable()) reader_.join();
    if (err_fd_ >= 0) ::close(err_fd_);
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string err() const {
    std::lock_guard<std::mutex> lock(mu_);
    return err_;
  }
  bool running() const { return pid_ > 0 && status_ == -1; }

  // SIGTERM, then the exit status (128 + signal where a signal ended it; -1 if it did not end in time).
  int terminate(std::chrono::seconds timeout = std::chrono::seconds(60)) {
    if (!running()) return status_;
    ::kill(pid_, SIGTERM);
    return wait_exit(timeout);
  }

  // The server's resident memory now, from /proc (0 where it cannot be read).
  uint64_t rss_bytes() const {
    const std::string s = slurp("/proc/" + std::to_string(pid_) + "/statm");
    uint64_t size = 0, resident = 0;
    if (std::sscanf(s.c_str(), "%lu %lu", &size, &resident) != 2) return 0;
    return resident * uint64_t(::sysconf(_SC_PAGESIZE));
  }

 private:
  int wait_exit(std::chrono::seconds timeout) {
    const int pidfd = int(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      const int r = ::poll(&p, 1, int(std::chrono::milliseconds(timeout).count()));
      ::close(pidfd);
      if (r <= 0) return -1;
    }
    int st = 0;
    if (::waitpid(pid_, &st, 0) != pid_) return -1;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
  }

  pid_t pid_ = -1;
  int err_fd_ = -1;
  int port_ = -1;
  int status_ = -1;
  std::thread reader_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string err_;
  bool eof_ = false;
};

// The shared gold model most tests serve, or the repo's trained one.
inline std::filesystem::path kjv_model() { return source_dir() / "models" / "kjv-moe.gguf"; }

}  // namespace df::test

#define DF_REQUIRE_SERVER(srv)                                               \
  ASSERT_TRUE((srv).ok()) << "the server did not start:\n" << (srv).err()
