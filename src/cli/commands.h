// One entry point per subcommand: int cmd_NAME(int argc, char** argv), argv[1] being the command's name.
// Each returns the process exit code: 0 success, 1 runtime failure, 2 usage error (../docs/CLI.md).
#pragma once

namespace df::cli {

int cmd_inspect(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_routing(int argc, char** argv);
int cmd_ingest(int argc, char** argv);
int cmd_measure(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_render_template(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_serve(int argc, char** argv);

}  // namespace df::cli
