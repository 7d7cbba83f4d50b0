// Runs the built CLI with arguments (a shell command line) and optional stdin text; returns the exit status, stdout
// and stderr separately.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "support/test_paths.h"

namespace df::test {

struct CliRun {
  int status = -1;
  std::string out, err;
};

inline CliRun run_cli_capture(const std::string& args, const std::string& stdin_text = "") {
  const auto dir = temp_dir("cli_run");
  const auto in_path = dir / "stdin.txt", err_path = dir / "stderr.txt";
  std::ofstream(in_path, std::ios::binary) << stdin_text;
  const std::string cmd = cli_path().string() + " " + args + " <" + in_path.string() + " 2>" + err_path.string();
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.err = slurp(err_path);
  return r;
}

}  // namespace df::test
