#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* summary;
};

// The one table of commands; each lives in its own file under src/cli/.
constexpr Command kCommands[] = {
    {"inspect", df::cli::cmd_inspect, "header, hyperparameters, tensors and bytes by category of a GGUF model"},
    {"synth", df::cli::cmd_synth, "write a model of a real architecture with seeded random weights"},
    {"ingest", df::cli::cmd_ingest, "repack a GGUF (file or URL) into a resumable streaming store"},
    {"measure", df::cli::cmd_measure, "disk bandwidth: sequential and random record reads, O_DIRECT, io_uring vs pread"},
    {"tokenize", df::cli::cmd_tokenize, "text to token ids (JSON), exactly as llama.cpp tokenizes"},
    {"render-template", df::cli::cmd_render_template, "print the prompt a chat template makes of a conversation"},
};

void print_usage(FILE* out) {
  std::fprintf(out, "usage: diskformer COMMAND [options]   (diskformer COMMAND --help for its options)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-16s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("diskformer 0.1.0\n");
    return 0;
  }
  for (const auto& c : kCommands)
    if (name == c.name) return c.run(argc, argv);
  std::fprintf(stderr, "diskformer: unknown command '%s'\n", name.c_str());
  print_usage(stderr);
  return 2;
}
