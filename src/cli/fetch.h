// A model named by -hf ORG/REPO[:QUANT] (and -hff FILE) or by -m URL, as llama.cpp's tools take them: fetched into
// the cache (store/hub.h) and opened from there. Progress and notes go to stderr (none with --quiet).
#pragma once

#include <optional>
#include <string>

#include "cli/args.h"

namespace df::cli {

void add_fetch_options(Args& args);  // -hf/--hf-repo, -hff/--hf-file

// The local path of the model: -hf's file fetched into the cache; -m URL's (where fetch_urls) likewise; else -m as
// given (nullopt without an error where there is none). A usage error sets args' exit code; a failed fetch prints
// its line and returns nullopt with the exit code left 0 (a runtime failure: exit 1).
std::optional<std::string> fetched_model(Args& args, bool fetch_urls = true);

}  // namespace df::cli
