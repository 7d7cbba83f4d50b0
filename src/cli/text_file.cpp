#include "cli/text_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

namespace df::cli {

Result<std::string> read_text_file(const std::string& path) {
  std::ostringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return Error{path + ": cannot open: " + std::strerror(errno)};
  ss << f.rdbuf();
  if (f.bad()) return Error{path + ": read error"};
  return ss.str();
}

}  // namespace df::cli
