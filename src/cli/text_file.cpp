#include "cli/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace df::cli {

Result<std::string> read_text_file(const std::string& path) {
  const bool from_stdin = path == "-";
  const int fd = from_stdin ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{path + ": cannot open: " + std::strerror(errno)};
  auto fail = [&](std::string message) {
    if (!from_stdin) ::close(fd);
    return Error{path + ": " + std::move(message)};
  };
  // A directory opens, and would read as empty text on some systems: refused by name, not taken as "".
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) return fail("is a directory, not a text file");
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("read failed at byte " + std::to_string(out.size()) + ": " + std::strerror(errno));
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  if (!from_stdin) ::close(fd);
  return out;
}

}  // namespace df::cli
