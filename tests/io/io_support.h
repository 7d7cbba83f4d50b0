// What the machine running the tests offers: io_uring may be blocked (seccomp in containers, gVisor) and the temp
// directory's filesystem may refuse O_DIRECT (tmpfs before Linux 6.6). Tests of a forced backend skip where it is
// missing; tests that expect O_DIRECT ask the filesystem first.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "diskformer/io/reader.h"

namespace df::io::test {

// "" where io_uring works, else why not.
inline const std::string& uring_unavailable_reason() {
  static const std::string reason = [] {
    auto r = Reader::create({.backend = Backend::kUring, .queue_depth = 1});
    return r.ok() ? std::string() : r.error().message;
  }();
  return reason;
}

inline bool direct_supported(const std::filesystem::path& dir) {
  auto probe = dir / ".o_direct_probe";
  std::ofstream(probe) << std::string(4096, 'x');
  int fd = ::open(probe.c_str(), O_RDONLY | O_DIRECT);
  if (fd >= 0) ::close(fd);
  std::filesystem::remove(probe);
  return fd >= 0;
}

}  // namespace df::io::test

#define DF_REQUIRE_BACKEND(backend)                                                                  \
  if ((backend) == ::df::io::Backend::kUring && !::df::io::test::uring_unavailable_reason().empty()) \
  GTEST_SKIP() << "io_uring is unavailable here: " << ::df::io::test::uring_unavailable_reason()
