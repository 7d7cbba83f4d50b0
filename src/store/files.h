// Small files written so that a crash leaves either the old contents or the new, never a mix: write a temporary
// file, fsync it, rename it over the target, fsync the directory.
#pragma once

#include <string>

#include "diskformer/util/result.h"

namespace df::store::detail {

Status write_file_durably(const std::string& path, const std::string& contents);
// Removes path (absent is fine) and makes the removal durable.
Status remove_durably(const std::string& path);
Status fsync_dir(const std::string& dir);
// The whole file; the error names the path. `missing` is set (and an error returned) when it does not exist.
Result<std::string> read_whole_file(const std::string& path, bool* missing = nullptr);
std::string errno_text(int e);

}  // namespace df::store::detail
