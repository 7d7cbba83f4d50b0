// The metadata keys llama.cpp reads for the llama (dense and Mixtral layout), qwen3, qwen3moe and qwen35moe families,
// written
// from one struct, and a tokenizer copied from another GGUF: what every writer of models (synth, convert) sets.
#pragma once

#include <cstdint>
#include <string>

#include "diskformer/gguf/reader.h"
#include "diskformer/gguf/writer.h"

namespace df::model {

// qwen35moe's keys beyond qwen3moe's (model/qwen35.h).
struct HybridMetadata {
  uint32_t n_ff_shared = 0;              // expert_shared_feed_forward_length
  uint32_t full_attention_interval = 0;  // one attention layer every this many, the others Gated DeltaNet
  uint32_t n_rot = 0;                    // rope.dimension_count
  int32_t rope_sections[4] = {};         // rope.dimension_sections
  uint32_t ssm_conv = 0, ssm_state = 0, ssm_k_heads = 0, ssm_v_heads = 0;
};

struct ArchMetadata {
  std::string arch;  // "llama", "qwen3", "qwen3moe" or "qwen35moe"
  std::string name;  // general.name
  gguf::GgmlType file_type = gguf::GgmlType::F32;  // the type of most matrices (general.file_type)
  uint32_t ftype = 0;  // llama_ftype code written instead where nonzero (a K-quant mix: Q4_K_M = 15, ...)
  uint32_t n_layer = 0, context = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  uint32_t n_expert = 0, n_expert_used = 0;  // 0: dense
  uint32_t n_ff_expert = 0;                  // qwen3moe's expert width (llama's Mixtral layout uses n_ff)
  double rope_base = 1e6, rms_eps = 1e-6;
  uint64_t n_vocab = 0;                      // llama writes it as vocab_size
  HybridMetadata hybrid;                     // qwen35moe
};

// general.* and ARCH.* keys, in the order llama.cpp's converter writes them.
void set_arch_metadata(gguf::Writer& w, const ArchMetadata& m);
// general.file_type's llama_ftype code of a file whose matrices are mostly of type t (0 where none applies).
uint32_t file_type_code(gguf::GgmlType t);
// Every tokenizer.* key of `from` (vocabulary, merges, scores, special ids, chat template).
void copy_tokenizer_metadata(gguf::Writer& w, const gguf::File& from);

}  // namespace df::model
