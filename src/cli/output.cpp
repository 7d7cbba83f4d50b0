#include "cli/output.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace df::cli {

int finish_stdout(const char* command, int code) {
  errno = 0;
  // A failed write leaves its bytes in the buffer, so the flush retries them and says why (errno).
  const bool flushed = std::fflush(stdout) == 0;
  const int e = errno;
  if (flushed && !std::ferror(stdout)) return code;
  if (code != 0) return code;
  std::fprintf(stderr, "diskformer %s: error writing to standard output%s%s\n", command, e ? ": " : "",
               e ? std::strerror(e) : "");
  return 1;
}

}  // namespace df::cli
