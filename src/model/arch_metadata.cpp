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
  if (a != "qwen35moe") w.set(a + ".feed_forward_length", Value::u32(m.n_ff));  // absent in its files
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
    if (a == "qwen3moe" || a == "qwen35moe") w.set(a + ".expert_feed_forward_length", Value::u32(m.n_ff_expert));
  }
  if (a == "qwen35moe") {
    const HybridMetadata& h = m.hybrid;
    w.set(a + ".expert_shared_feed_forward_length", Value::u32(h.n_ff_shared));
    w.set(a + ".ssm.conv_kernel", Value::u32(h.ssm_conv));
    w.set(a + ".ssm.state_size", Value::u32(h.ssm_state));
    w.set(a + ".ssm.group_count", Value::u32(h.ssm_k_heads));
    w.set(a + ".ssm.time_step_rank", Value::u32(h.ssm_v_heads));
    w.set(a + ".ssm.inner_size", Value::u32(h.ssm_state * h.ssm_v_heads));
    w.set(a + ".full_attention_interval", Value::u32(h.full_attention_interval));
    w.set(a + ".rope.dimension_count", Value::u32(h.n_rot));
    std::vector<Value> sections;
    for (int32_t x : h.rope_sections) sections.push_back(Value::i32(x));
    w.set(a + ".rope.dimension_sections", Value::array(gguf::ValueType::I32, std::move(sections)));
  }
}

void copy_tokenizer_metadata(gguf::Writer& w, const gguf::File& from) {
  for (const auto& kv : from.metadata)
    if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
}

}  // namespace df::model
