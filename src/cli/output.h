// Whether a command's product reached stdout. Every write to stdout goes through stdio, whose error flag is sticky,
// so one check after the command covers them all: a full disk (> /dev/full), a closed descriptor, an I/O error.
#pragma once

namespace df::cli {

// Flushes stdout. When the command succeeded (code 0) but a write or the flush failed, prints one line
// ("diskformer COMMAND: error writing to standard output: No space left on device") and returns 1; otherwise
// returns code (a command that failed has printed its own line already).
int finish_stdout(const char* command, int code);

}  // namespace df::cli
