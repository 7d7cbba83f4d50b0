#include "diskformer/synth/quant_mix.h"

#include <cctype>
#include <cstdio>

namespace df::synth {

namespace {

using gguf::GgmlType;

constexpr std::pair<Mix, std::string_view> kNames[] = {
    {Mix::kQ2_K, "q2_k"},     {Mix::kQ3_K_M, "q3_k_m"}, {Mix::kQ4_K_M, "q4_k_m"},
    {Mix::kQ5_K_M, "q5_k_m"}, {Mix::kQ6_K, "q6_k"},     {Mix::kIQ4_XS, "iq4_xs"},
};

GgmlType base_type(Mix m) {
  switch (m) {
    case Mix::kQ2_K: return GgmlType::Q2_K;
    case Mix::kQ3_K_M: return GgmlType::Q3_K;
    case Mix::kQ4_K_M: return GgmlType::Q4_K;
    case Mix::kQ5_K_M: return GgmlType::Q5_K;
    case Mix::kQ6_K: return GgmlType::Q6_K;
    case Mix::kIQ4_XS: return GgmlType::IQ4_XS;
  }
  return GgmlType::Q4_K;
}

// The quantizer's "use more bits" layers: the first and last eighth, and every third one between.
bool more_bits(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

bool has(const std::string& name, std::string_view part) { return name.find(part) != std::string::npos; }

// A row of `cols` that does not fill the type's blocks falls back to a 32-block type (F16 where even that fails).
GgmlType fallback(GgmlType t, uint64_t cols) {
  if (cols % gguf::type_info(t)->block_elems == 0) return t;
  GgmlType f = GgmlType::F16;
  switch (t) {
    case GgmlType::IQ4_XS: f = GgmlType::IQ4_NL; break;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: f = GgmlType::Q4_0; break;
    case GgmlType::Q4_K: f = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: f = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: f = GgmlType::Q8_0; break;
    default: break;
  }
  return cols % gguf::type_info(f)->block_elems == 0 ? f : GgmlType::F16;
}

}  // namespace

std::optional<Mix> mix_from_name(std::string_view name) {
  std::string lower(name);
  for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& [m, n] : kNames)
    if (n == lower) return m;
  return std::nullopt;
}

std::string_view mix_name(Mix m) {
  for (const auto& [k, n] : kNames)
    if (k == m) return n;
  return "?";
}

GgmlType mix_tensor_type(Mix m, const MixModel& model, const std::string& name, const std::vector<uint64_t>& shape) {
  const uint64_t cols = shape.empty() ? 0 : shape[0];
  const int n_layer = int(model.n_layer);
  const uint32_t gqa = model.n_head_kv ? model.n_head / model.n_head_kv : 1;
  const bool eight_experts = model.n_expert == 8;
  int layer = 0;
  std::sscanf(name.c_str(), "blk.%d.", &layer);
  GgmlType t = base_type(m);

  if (name == "output.weight") {
    // The head: Q6_K, or Q8_0 where its rows do not fill 256-blocks.
    return cols % 256 == 0 ? GgmlType::Q6_K : fallback(GgmlType::Q8_0, cols);
  }
  if (name == "token_embd.weight") return fallback(t, cols);

  if (has(name, "attn_v.weight") || has(name, "attn_qkv.weight")) {
    // The quantizer counts attn_v and fused attn_qkv tensors together in file order; every layer has one of them
    // (qwen35moe: attn_qkv in its DeltaNet layers, attn_v in its attention layers), so the count is the layer index.
    if (m == Mix::kQ2_K) t = gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
    else if (m == Mix::kQ3_K_M) t = layer < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
    else if (m == Mix::kIQ4_XS && gqa >= 4) t = GgmlType::Q5_K;
    else if ((m == Mix::kQ4_K_M || m == Mix::kQ5_K_M) && more_bits(layer, n_layer)) t = GgmlType::Q6_K;
    if (eight_experts) t = GgmlType::Q8_0;  // Mixtral-style models spend the few bytes
  } else if (has(name, "attn_k.weight")) {
    if (eight_experts) t = GgmlType::Q8_0;
  } else if (has(name, "ffn_down")) {
    if (m == Mix::kQ2_K) t = GgmlType::Q3_K;
    else if (m == Mix::kQ3_K_M) t = layer < n_layer / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
    else if (m == Mix::kQ4_K_M && more_bits(layer, n_layer)) t = GgmlType::Q6_K;
    else if (m == Mix::kIQ4_XS && layer < n_layer / 8) t = GgmlType::Q5_K;
    else if (m == Mix::kQ5_K_M && more_bits(layer, n_layer)) t = GgmlType::Q6_K;
  } else if (has(name, "attn_output.weight")) {
    if (eight_experts) {
      if (m == Mix::kQ2_K || m == Mix::kQ3_K_M || m == Mix::kQ4_K_M || m == Mix::kIQ4_XS) t = GgmlType::Q5_K;
    } else {
      if (m == Mix::kQ2_K) t = GgmlType::Q3_K;
      else if (m == Mix::kQ3_K_M) t = GgmlType::Q4_K;
    }
  }
  return fallback(t, cols);
}

}  // namespace df::synth
