// The ggml tensor type table: elements and bytes per block for every type current GGUF files use.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace df::gguf {

// Values are the on-disk codes (ggml.h). Gaps are types ggml removed; files using them are refused.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct TypeInfo {
  std::string_view name;   // as llama.cpp prints it: "q4_0", "bf16", ...
  uint32_t block_elems;    // elements per block
  uint32_t block_bytes;    // bytes per block
};

// nullptr for a code that no current ggml defines.
const TypeInfo* type_info(uint32_t code);
inline const TypeInfo* type_info(GgmlType t) { return type_info(static_cast<uint32_t>(t)); }
std::string_view type_name(GgmlType t);
// Case-insensitive: "q4_0", "Q4_0", "bf16".
std::optional<GgmlType> type_from_name(std::string_view name);

// Bytes of n elements of type t; n must be a whole number of blocks.
uint64_t row_bytes(GgmlType t, uint64_t n_elements);

}  // namespace df::gguf
