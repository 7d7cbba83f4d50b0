// Small files written so that a crash leaves either the old contents or the new, never a mix: write a temporary
// file, fsync it, rename it over the target, fsync the directory.
//
// Nothing inside a store is followed: a link planted as one of its files (data.bin -> ~/.bashrc) would otherwise
// have its target overwritten. Files are opened with O_NOFOLLOW, new ones are created with O_EXCL beside their
// target and renamed over it (a rename replaces a link, never what it points to), and refuse_links() turns away a
// directory that holds one.
#pragma once

#include <string>

#include "diskformer/util/result.h"

namespace df::store::detail {

Status write_file_durably(const std::string& path, const std::string& contents);
// Removes path (absent is fine) and makes the removal durable.
Status remove_durably(const std::string& path);
Status fsync_dir(const std::string& dir);
// Refuses `dir` where one of a store's files (manifest, headers, data, checkpoint, lock) is a symbolic link or not a
// regular file, naming it. Absent files are fine.
Status refuse_links(const std::string& dir);
// Why open() failed, in words: ELOOP under O_NOFOLLOW means the path is a link.
std::string open_error(const std::string& path, const char* doing, int e);
// The whole file (not followed where it is a link); the error names the path. `missing` is set (and an error
// returned) when it does not exist.
Result<std::string> read_whole_file(const std::string& path, bool* missing = nullptr);
std::string errno_text(int e);

}  // namespace df::store::detail
