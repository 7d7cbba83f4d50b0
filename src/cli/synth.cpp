#include <cstdio>

#include "cli/commands.h"

namespace df::cli {
int cmd_synth(int, char**) {
  std::fprintf(stderr, "diskformer synth: not built yet\n");
  return 1;
}
}  // namespace df::cli
