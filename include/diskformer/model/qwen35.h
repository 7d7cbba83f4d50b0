// qwen35moe (Qwen3.5 / Qwen3.6 MoE, llama.cpp's src/models/qwen35moe.cpp): what its metadata and tensors hold
// beyond the qwen3moe family.
//
//   layers:     Gated DeltaNet (linear attention with a recurrent state) where (il + 1) % full_attention_interval
//               != 0, or as attention.recurrent_layers says; gated full attention in the others. block_count also
//               counts the nextn_predict_layers MTP blocks after them, which the main pass never runs.
//   attention:  attn_q gives each head's query and then its output gate; q/k RMSNorm per head; RoPE on the first
//               rope.dimension_count dims (llama.cpp's IMROPE: for text, whose positions are (p, p, p, 0), NeoX
//               pairs, provided rope.dimension_sections give every pair a text section).
//   DeltaNet:   ssm.conv_kernel, ssm.state_size (head size), ssm.group_count (q/k heads), ssm.time_step_rank
//               (v heads), ssm.inner_size = state_size x time_step_rank.
//   FFN:        qwen3moe's routed experts plus a shared expert (expert_shared_feed_forward_length) scaled by
//               sigmoid(ffn_gate_inp_shexp . x); the FFN's input norm is named post_attention_norm.
#pragma once

#include <cstdint>

#include "diskformer/gguf/reader.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/util/result.h"

namespace df::model {

// Completes a spec whose generic keys spec_from_gguf has read. Errors name the file and the key.
Status read_qwen35moe_spec(const gguf::File& f, ModelSpec& s);

// Block il's tensors (a DeltaNet or an attention layer, as s.recurrent says), checked against the spec.
Result<LayerTensors> bind_qwen35moe_layer(const gguf::File& f, const ModelSpec& s, uint32_t il);

}  // namespace df::model
