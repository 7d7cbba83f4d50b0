// A matrix of one ggml type as it lies in memory -- host RAM for the CPU backend, device memory for the CUDA one --
// laid out as the file stores it: `rows` rows of `cols` elements; row r starts at data + r * row_bytes.
// A 1-D tensor (norm weights) is one row.
#pragma once

#include <cstdint>

#include "diskformer/gguf/types.h"

namespace df::model {

struct Mat {
  gguf::GgmlType type = gguf::GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t cols = 0;
  int64_t rows = 0;
  uint64_t row_bytes = 0;

  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes; }
  const float* f32() const { return reinterpret_cast<const float*>(data); }
  uint64_t bytes() const { return static_cast<uint64_t>(rows) * row_bytes; }
  bool present() const { return data != nullptr; }
  // Rows [first, first + count) as a matrix of their own (one expert of a stacked expert tensor).
  Mat slice(int64_t first, int64_t count) const { return {type, row(first), cols, count, row_bytes}; }
  // The same shape and type at other bytes (a copy of this matrix elsewhere: a GPU slot, an arena).
  Mat at(const uint8_t* other) const { return {type, other, cols, rows, row_bytes}; }
};

}  // namespace df::model
