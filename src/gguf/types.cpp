#include "diskformer/gguf/types.h"

#include <array>
#include <cctype>

#include "diskformer/util/check.h"

namespace df::gguf {

namespace {

struct Entry {
  uint32_t code;
  TypeInfo info;
};

// Block sizes follow ggml's block structs (ggml-common.h); QK_K = 256.
constexpr Entry kTypes[] = {
    {0, {"f32", 1, 4}},        {1, {"f16", 1, 2}},          {2, {"q4_0", 32, 18}},      {3, {"q4_1", 32, 20}},
    {6, {"q5_0", 32, 22}},     {7, {"q5_1", 32, 24}},       {8, {"q8_0", 32, 34}},      {9, {"q8_1", 32, 36}},
    {10, {"q2_K", 256, 84}},   {11, {"q3_K", 256, 110}},    {12, {"q4_K", 256, 144}},   {13, {"q5_K", 256, 176}},
    {14, {"q6_K", 256, 210}},  {15, {"q8_K", 256, 292}},    {16, {"iq2_xxs", 256, 66}}, {17, {"iq2_xs", 256, 74}},
    {18, {"iq3_xxs", 256, 98}}, {19, {"iq1_s", 256, 50}},   {20, {"iq4_nl", 32, 18}},   {21, {"iq3_s", 256, 110}},
    {22, {"iq2_s", 256, 82}},  {23, {"iq4_xs", 256, 136}},  {24, {"i8", 1, 1}},         {25, {"i16", 1, 2}},
    {26, {"i32", 1, 4}},       {27, {"i64", 1, 8}},         {28, {"f64", 1, 8}},        {29, {"iq1_m", 256, 56}},
    {30, {"bf16", 1, 2}},      {34, {"tq1_0", 256, 54}},    {35, {"tq2_0", 256, 66}},   {39, {"mxfp4", 32, 17}},
};

constexpr uint32_t kMaxCode = 40;

constexpr std::array<const TypeInfo*, kMaxCode> make_table() {
  std::array<const TypeInfo*, kMaxCode> t{};
  for (const auto& e : kTypes) t[e.code] = &e.info;
  return t;
}
constexpr auto kTable = make_table();

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

}  // namespace

const TypeInfo* type_info(uint32_t code) { return code < kMaxCode ? kTable[code] : nullptr; }

std::string_view type_name(GgmlType t) {
  const TypeInfo* info = type_info(t);
  return info ? info->name : std::string_view("unknown");
}

std::optional<GgmlType> type_from_name(std::string_view name) {
  for (const auto& e : kTypes)
    if (iequal(e.info.name, name)) return static_cast<GgmlType>(e.code);
  return std::nullopt;
}

uint64_t row_bytes(GgmlType t, uint64_t n_elements) {
  const TypeInfo* info = type_info(t);
  DF_CHECK(info != nullptr);
  DF_CHECK(n_elements % info->block_elems == 0);
  return n_elements / info->block_elems * info->block_bytes;
}

}  // namespace df::gguf
