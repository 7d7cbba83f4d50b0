#include "diskformer/model/arch_metadata.h"

namespace df::model {

using gguf::GgmlType;
using gguf::Value;

uint32_t file_type_code(GgmlType t) {  // llama_ftype's "mostly" values
  switch (t) {
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q8_0: return 7;
    case GgmlType::BF16: return 32;
    default: return 0;
  }
}

void set_arch_metadata(gguf::Writer& w, const ArchMetadata& m) {
  const std::string& a = m.arch;
  w.set("general.architecture", Value::string(a));
  w.set("general.name", Value::string(m.name));
  w.set("general.alignment", Value::u32(32));
  w.set("general.file_type", Value::u32(m.ftype ? m.ftype : file_type_code(m.file_type)));
  w.set(a + ".block_count", Value::u32(m.n_layer));
  w.set(a + ".context_length", Value::u32(m.context));
  w.set(a + ".embedding_length", Value::u32(m.n_embd));
  w.set(a + ".feed_forward_length", Value::u32(m.n_ff));
  w.set(a + ".attention.head_count", Value::u32(m.n_head));
  w.set(a + ".attention.head_count_kv", Value::u32(m.n_head_kv));
  w.set(a + ".attention.key_length", Value::u32(m.head_dim));
  w.set(a + ".attention.value_length", Value::u32(m.head_dim));
  w.set(a + ".rope.freq_base", Value::f32(static_cast<float>(m.rope_base)));
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::f32(static_cast<float>(m.rms_eps)));
  if (a == "llama") {
    w.set(a + ".rope.dimension_count", Value::u32(m.head_dim));
    w.set(a + ".vocab_size", Value::u32(static_cast<uint32_t>(m.n_vocab)));
  }
  if (m.n_expert > 0) {
    w.set(a + ".expert_count", Value::u32(m.n_expert));
    w.set(a + ".expert_used_count", Value::u32(m.n_expert_used));
    if (a == "qwen3moe") w.set(a + ".expert_feed_forward_length", Value::u32(m.n_ff_expert));
  }
}

void copy_tokenizer_metadata(gguf::Writer& w, const gguf::File& from) {
  for (const auto& kv : from.metadata)
    if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
}

}  // namespace df::model
