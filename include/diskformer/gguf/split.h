// Models in several files, as llama.cpp's gguf-split writes them: PREFIX-00001-of-0000N.gguf holds the metadata
// and the first tensors, each further part PREFIX-0000K-of-0000N.gguf more tensors, and every part the keys
//
//   split.no             u16  the part's number, 0 for the first file
//   split.count          u16  the number of parts, the same in every part
//   split.tensors.count  i32  the tensors of all parts together
//
// Tensor offsets stay those of each part. Opened from the first part (as llama.cpp loads them), the parts become
// one gguf::File: the first part's metadata, every part's tensors in part order, each knowing its part.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/util/result.h"

namespace df::gguf {

constexpr const char* kSplitNo = "split.no";
constexpr const char* kSplitCount = "split.count";
constexpr const char* kSplitTensorsCount = "split.tensors.count";

struct SplitKeys {
  uint32_t no = 0;     // 0-based
  uint32_t count = 1;
  std::optional<uint64_t> tensors;  // split.tensors.count where present
};
// A file's split keys; nullopt where it has no split.count or a count of 1 (a file of its own). The error names
// the file and the key whose type or value is wrong (a count of 0, a part number not below the count).
Result<std::optional<SplitKeys>> split_keys(const File& f);

// "PREFIX-0000K-of-0000N.gguf" for part `no` (0-based) of `count`.
std::string split_path(const std::string& prefix, uint32_t no, uint32_t count);
// Every part's path (or URL) from the path of part `no` of `count`, which must be named as split_path names it.
// The error names the path and the name it should end with.
Result<std::vector<std::string>> split_paths(const std::string& path, uint32_t no, uint32_t count);

// Joins the parts of a split model (parts[k] is part k) into one File: path, metadata, alignment, version and
// data_offset of the first; the tensors of all in part order, each with its `part`; parts = where each part is.
// Every part must say split.count = parts.size() and split.no = its place; the first must give
// split.tensors.count and the parts must hold that many tensors, none of them twice. The error names the part's
// file and the key or tensor.
Result<File> join_split(std::vector<File> parts);

// A GGUF file, or the first part of a split model with every other part beside it (their names made from the
// first's). A part other than the first is refused with the name of the first.
Result<File> read_model(const std::string& path, const ParseLimits& limits = {});

}  // namespace df::gguf
