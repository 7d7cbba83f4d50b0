// GGUF v3 writer that streams tensor data: header first, then each tensor's bytes in the order the tensors were
// added, so a file far larger than RAM can be written. Writes OUT.partial and renames it on finish(), so a failed
// or interrupted write never leaves a file that looks complete.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/gguf/types.h"
#include "diskformer/gguf/value.h"
#include "diskformer/util/result.h"

namespace df::gguf {

struct WriterOptions {
  uint32_t alignment = 32;  // general.alignment; a power of two
  uint32_t version = 3;
};

class Writer {
 public:
  static Result<Writer> create(const std::string& path, WriterOptions options = {});
  Writer(Writer&&) noexcept;
  Writer& operator=(Writer&&) noexcept;
  ~Writer();  // an unfinished writer removes its partial file

  // Metadata in insertion order; setting a key twice replaces its value in place.
  void set(const std::string& key, Value value);
  // Declares a tensor; its data comes later through write_data, in declaration order.
  Status add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> shape);

  // Writes the header (metadata and tensor infos). No set/add_tensor after this.
  Status write_header();
  // Appends bytes of the current tensor; a call may span tensor boundaries. Alignment padding is inserted.
  Status write_data(const void* data, size_t n);
  // Checks that every tensor got all its bytes, flushes, fsyncs and renames into place.
  Status finish();

  uint64_t total_data_bytes() const;  // tensor bytes including padding, known after the tensors are declared
  uint64_t bytes_written() const { return written_; }

 private:
  Writer() = default;
  Status flush_buffer();
  Status put(const void* data, size_t n);

  struct Pending {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> shape;
    uint64_t n_bytes;
    uint64_t rel_offset;  // relative to the data section
  };
  std::string path_, partial_path_;
  WriterOptions options_;
  int fd_ = -1;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<Pending> tensors_;
  bool header_written_ = false, finished_ = false;
  size_t current_ = 0;          // tensor receiving data
  uint64_t current_filled_ = 0; // bytes of it received
  uint64_t written_ = 0;        // bytes of the file written so far
  std::vector<uint8_t> buffer_; // coalesces small writes
};

}  // namespace df::gguf
