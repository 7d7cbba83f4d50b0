// GGUF v2/v3 header parser: metadata, tensor index, alignment, absolute data offsets.
// Reads only the header, through bounded reads; never the tensor data, never the whole file.
// Every failure is an Error naming the file, the field and the byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <map>
#include <vector>

#include "diskformer/gguf/types.h"
#include "diskformer/gguf/value.h"
#include "diskformer/util/result.h"

namespace df::gguf {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS

// Random access to the bytes being parsed: a file (pread) or memory (the fuzzer, tests).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly n bytes at offset; offset + n <= size() is the caller's promise.
  virtual Status read_at(uint64_t offset, void* dst, size_t n) = 0;
};
std::unique_ptr<ByteSource> memory_source(const void* data, size_t n);

struct KeyValue {
  std::string key;
  Value value;
  uint64_t offset = 0;  // where the key's record starts in the file
};

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> shape;  // ggml order: shape[0] is the row length (contiguous), up to kMaxDims entries
  uint64_t n_elements = 0;
  uint64_t offset = 0;          // absolute byte offset of the data in the file
  uint64_t n_bytes = 0;
  uint64_t info_offset = 0;     // where this tensor's info record starts in the header
  uint32_t part = 0;            // a split model (split.h): the part whose file holds the data (File::parts)

  uint64_t rows() const { return shape.empty() ? 0 : n_elements / shape[0]; }
  uint64_t row_bytes() const { return shape.empty() ? 0 : n_bytes / rows(); }
};

// One file of a split model (split.h).
struct FilePart {
  std::string path;
  uint64_t file_size = 0;
  uint64_t data_offset = 0;
  size_t n_tensors = 0;
};

struct File {
  std::string path;                 // a split model: its first part
  uint32_t version = 0;
  uint64_t file_size = 0;           // a split model: all parts together
  uint32_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;         // absolute start of the tensor data section
  std::vector<KeyValue> metadata;   // file order
  std::vector<TensorInfo> tensors;  // file order (a split model: part order)
  std::vector<FilePart> parts;      // a split model: every part in order, parts[0] being `path`; empty otherwise

  size_t n_parts() const { return parts.empty() ? 1 : parts.size(); }
  const std::string& part_path(size_t i) const { return parts.empty() ? path : parts[i].path; }
  uint64_t part_size(size_t i) const { return parts.empty() ? file_size : parts[i].file_size; }

  const Value* find(std::string_view key) const;
  const TensorInfo* tensor(std::string_view name) const;

  // Typed lookups whose errors name the file and the key (missing, or wrong type).
  Result<uint64_t> get_u64(std::string_view key) const;
  Result<double> get_f64(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<const Array*> get_array(std::string_view key) const;
  uint64_t get_u64_or(std::string_view key, uint64_t fallback) const;
  double get_f64_or(std::string_view key, double fallback) const;
  std::string get_string_or(std::string_view key, std::string fallback) const;

  // general.architecture, or "" where absent (vocabulary-only files).
  std::string architecture() const;

  // Builds the name indexes; the parser calls it. Call again after editing metadata or tensors by hand.
  void reindex();

 private:
  std::map<std::string, size_t, std::less<>> kv_index_, tensor_index_;  // name -> position
};

struct ParseLimits {
  uint32_t max_array_depth = 8;  // nested arrays deeper than this are refused (and cannot blow the stack)
};

Result<File> read_file(const std::string& path, const ParseLimits& limits = {});
// `name` is used in error messages in place of a path.
Result<File> parse(ByteSource& src, const std::string& name, const ParseLimits& limits = {});

}  // namespace df::gguf
