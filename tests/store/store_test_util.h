// What the store tests share: running the CLI as a child process (to kill it, to limit it), reading files whole.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/test_paths.h"

namespace df::test {

// A copy the test may change later (the shared files are read-only, and copy_file keeps their permissions).
inline void copy_writable(const std::filesystem::path& from, const std::filesystem::path& to) {
  namespace fs = std::filesystem;
  if (fs::exists(to)) fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
}

struct SpawnOptions {
  long max_file_bytes = -1;  // RLIMIT_FSIZE in the child
  int uid = -1;              // setuid in the child (tests running as root play an unprivileged user)
  std::vector<std::string> env;  // NAME=VALUE set in the child only
};

// Starts `diskformer ARGS...` with stdout and stderr going to files; returns its pid.
inline pid_t spawn_cli(const std::vector<std::string>& args, const std::string& out_path, const std::string& err_path,
                       const SpawnOptions& o = {}) {
  std::vector<std::string> all{cli_path().string()};
  all.insert(all.end(), args.begin(), args.end());
  pid_t pid = ::fork();
  if (pid == 0) {
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    ::dup2(out, 1);
    ::dup2(err, 2);
    if (o.max_file_bytes >= 0) {
      rlimit rl{static_cast<rlim_t>(o.max_file_bytes), static_cast<rlim_t>(o.max_file_bytes)};
      ::setrlimit(RLIMIT_FSIZE, &rl);
    }
    for (const auto& e : o.env) {
      const size_t eq = e.find('=');
      ::setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
    if (o.uid >= 0 && (::setgid(static_cast<gid_t>(o.uid)) != 0 || ::setuid(static_cast<uid_t>(o.uid)) != 0)) _exit(126);
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// The exit code, or 128 + the signal that ended it.
inline int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

struct CliRun {
  int code = -1;
  std::string out, err;
};

inline CliRun run_cli(const std::vector<std::string>& args, const std::filesystem::path& scratch,
                      const SpawnOptions& o = {}) {
  std::string out = (scratch / "cli.out").string(), err = (scratch / "cli.err").string();
  CliRun r;
  r.code = wait_child(spawn_cli(args, out, err, o));
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace df::test
