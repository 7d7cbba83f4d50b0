#include "support/tiny_model.h"

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "diskformer/backend/cpu/numeric.h"
#include "diskformer/gguf/reader.h"
#include "diskformer/gguf/writer.h"
#include "diskformer/model/arch_metadata.h"

namespace df::test {

namespace {

using gguf::GgmlType;

struct Planned {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> shape;
  bool norm;  // f32, values near 1
};

// Random tensor bytes of a valid encoding: scales small enough that activations stay in range.
std::vector<uint8_t> random_bytes(const Planned& t, std::mt19937_64& rng) {
  uint64_t n = 1;
  for (auto d : t.shape) n *= d;
  std::vector<uint8_t> out(gguf::row_bytes(t.type, n));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float scale = 1.0f / std::sqrt(float(t.shape[0]));
  switch (t.type) {
    case GgmlType::F32: {
      auto* f = reinterpret_cast<float*>(out.data());
      for (uint64_t i = 0; i < n; ++i) f[i] = t.norm ? 1.0f + 0.1f * u(rng) : u(rng) * scale * 1.7f;
      break;
    }
    case GgmlType::F16:
    case GgmlType::BF16: {
      auto* h = reinterpret_cast<uint16_t*>(out.data());
      for (uint64_t i = 0; i < n; ++i)
        h[i] = t.type == GgmlType::F16 ? cpu::f32_to_f16(u(rng) * scale * 1.7f) : cpu::f32_to_bf16(u(rng) * scale * 1.7f);
      break;
    }
    case GgmlType::Q8_0: {
      auto* b = reinterpret_cast<cpu::BlockQ8_0*>(out.data());
      for (uint64_t i = 0; i < n / 32; ++i) {
        b[i].d = cpu::f32_to_f16(scale * 1.7f / 127.0f);
        for (auto& q : b[i].qs) q = int8_t(int(rng() % 255) - 127);
      }
      break;
    }
    case GgmlType::MXFP4:  // refused before it is read
      for (auto& b : out) b = uint8_t(rng());
      break;
    default: {  // Q4_0: an f16 scale, then random bits
      const uint32_t bb = 18;
      for (uint64_t i = 0; i < n / 32; ++i) {
        uint8_t* b = out.data() + i * bb;
        const uint16_t d = cpu::f32_to_f16(scale * 1.7f / 8.0f);
        b[0] = uint8_t(d & 0xff), b[1] = uint8_t(d >> 8);
        for (uint32_t j = 2; j < bb; ++j) b[j] = uint8_t(rng());
      }
    }
  }
  return out;
}

}  // namespace

Status write_tiny_model(const std::string& path, const TinyModel& model) {
  TinyModel m = model;
  std::optional<gguf::File> vocab;
  if (!m.tokenizer_from.empty()) {
    DF_ASSIGN(vocab, gguf::read_file(m.tokenizer_from));
    DF_ASSIGN(const gguf::Array* tokens, vocab->get_array("tokenizer.ggml.tokens"));
    m.n_vocab = uint32_t(tokens->items.size());
  }
  DF_ASSIGN(auto w, gguf::Writer::create(path));
  const std::string a = m.arch + ".";
  w.set("general.architecture", gguf::Value::string(m.arch));
  w.set("general.name", gguf::Value::string("tiny test model"));
  w.set(a + "block_count", gguf::Value::u32(m.n_layer));
  w.set(a + "context_length", gguf::Value::u32(512));
  w.set(a + "embedding_length", gguf::Value::u32(m.n_embd));
  w.set(a + "feed_forward_length", gguf::Value::u32(m.n_ff));
  w.set(a + "attention.head_count", gguf::Value::u32(m.n_head));
  w.set(a + "attention.head_count_kv", gguf::Value::u32(m.n_head_kv));
  w.set(a + "attention.key_length", gguf::Value::u32(m.head_dim));
  w.set(a + "attention.value_length", gguf::Value::u32(m.head_dim));
  w.set(a + "rope.freq_base", gguf::Value::f32(10000.0f));
  w.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-6f));
  if (m.n_expert) {
    w.set(a + "expert_count", gguf::Value::u32(m.n_expert));
    w.set(a + "expert_used_count", gguf::Value::u32(m.n_expert_used));
    w.set(a + "expert_feed_forward_length", gguf::Value::u32(m.n_ff_expert));
  }
  if (vocab) {
    model::copy_tokenizer_metadata(w, *vocab);
    if (m.eos_id >= 0) w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(uint32_t(m.eos_id)));
  }
  const uint64_t E = m.n_embd, V = m.n_vocab, Q = uint64_t(m.n_head) * m.head_dim, KV = uint64_t(m.n_head_kv) * m.head_dim;
  std::vector<Planned> plan;
  auto add = [&](const std::string& name, std::vector<uint64_t> shape, bool norm) {
    if (name == m.drop_tensor) return;
    if (name == m.widen_tensor) shape.back() += 1;
    GgmlType t = norm ? GgmlType::F32 : m.type;
    if (name.find("ffn_gate_inp") != std::string::npos) t = GgmlType::F32;
    if (name == m.retype_tensor) t = GgmlType::MXFP4;
    plan.push_back({name, t, shape, norm});
  };
  add("token_embd.weight", {E, V}, false);
  for (uint32_t il = 0; il < m.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    add(p + "attn_norm.weight", {E}, true);
    add(p + "attn_q.weight", {E, Q}, false);
    add(p + "attn_k.weight", {E, KV}, false);
    add(p + "attn_v.weight", {E, KV}, false);
    add(p + "attn_output.weight", {Q, E}, false);
    if (m.arch != "llama") {
      add(p + "attn_q_norm.weight", {m.head_dim}, true);
      add(p + "attn_k_norm.weight", {m.head_dim}, true);
    }
    add(p + "ffn_norm.weight", {E}, true);
    if (m.n_expert) {
      add(p + "ffn_gate_inp.weight", {E, m.n_expert}, false);
      add(p + "ffn_gate_exps.weight", {E, m.n_ff_expert, m.n_expert}, false);
      add(p + "ffn_up_exps.weight", {E, m.n_ff_expert, m.n_expert}, false);
      add(p + "ffn_down_exps.weight", {m.n_ff_expert, E, m.n_expert}, false);
    } else {
      add(p + "ffn_gate.weight", {E, m.n_ff}, false);
      add(p + "ffn_up.weight", {E, m.n_ff}, false);
      add(p + "ffn_down.weight", {m.n_ff, E}, false);
    }
  }
  add("output_norm.weight", {E}, true);
  if (!m.tied_output) add("output.weight", {E, V}, false);
  for (const auto& t : plan) DF_TRY(w.add_tensor(t.name, t.type, t.shape));
  DF_TRY(w.write_header());
  std::mt19937_64 rng(m.seed);
  for (const auto& t : plan) {
    const auto bytes = random_bytes(t, rng);
    DF_TRY(w.write_data(bytes.data(), bytes.size()));
  }
  return w.finish();
}

}  // namespace df::test
