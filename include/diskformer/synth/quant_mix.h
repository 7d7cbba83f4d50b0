// The type of each tensor in the K-quant and IQ4 files people download: llama.cpp's quantizer (llama-quant.cpp,
// llama_tensor_get_type) gives a mix one base type and moves some tensors up by role and layer (attn_v and
// ffn_down of some layers, the output head) or, where a row does not fill the base type's blocks, to a 32-block
// type. synth writes files with these rules so that they hold what a real download holds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diskformer/gguf/types.h"

namespace df::synth {

// llama.cpp's file types (llama_ftype) that synth writes as mixes; the value is the code of general.file_type.
enum class Mix : uint32_t {
  kQ2_K = 10,
  kQ3_K_M = 12,
  kQ4_K_M = 15,
  kQ5_K_M = 17,
  kQ6_K = 18,
  kIQ4_XS = 30,
};

// "q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "q6_k", "iq4_xs" (any case); nullopt otherwise.
std::optional<Mix> mix_from_name(std::string_view name);
std::string_view mix_name(Mix m);

// What the quantizer's rules read from the model besides a tensor's name and shape.
struct MixModel {
  uint32_t n_layer = 0;
  uint32_t n_head = 0, n_head_kv = 0;
  uint32_t n_expert = 0;  // 0 or 1: dense
};

// The type llama.cpp's quantizer gives a quantized tensor `name` of shape `shape` (shape[0]: row length) in mix
// m: token_embd, output, blk.N.{attn_q,attn_k,attn_v,attn_qkv,attn_output,ffn_gate,ffn_up,ffn_down}[_exps|_shexp]
// .weight; any other matrix (qwen35moe's attn_gate, ssm_alpha, ssm_beta, ssm_out) takes the base type.
gguf::GgmlType mix_tensor_type(Mix m, const MixModel& model, const std::string& name,
                               const std::vector<uint64_t>& shape);

}  // namespace df::synth
