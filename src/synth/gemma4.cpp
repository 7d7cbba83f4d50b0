// gemma4 models with seeded random weights: the keys and tensors llama.cpp's converter writes for Gemma 4
// (../shared/docs/ARCHS.md), in the 26B-A4B layout (routed experts beside every layer's dense MLP) or the E2B one
// (per-layer embeddings, the last layers sharing KV, a double-wide MLP there). Output tied to the embeddings.
#include <algorithm>
#include <cmath>

#include "diskformer/model/gemma4.h"
#include "synth/planned.h"

namespace df::synth {

namespace {

using gguf::GgmlType;
using gguf::Value;

struct Layer {
  bool sliding;
  bool own_kv;
  uint32_t n_head_kv, head_dim, ff;
  bool has_v;
};

Layer layer_of(const Shape& s, uint32_t il) {
  const Gemma4Shape& g = s.gemma4;
  Layer l;
  l.sliding = il % g.period != g.period - 1;
  l.own_kv = il < s.n_layer - g.n_kv_shared;
  l.n_head_kv = l.sliding ? s.n_head_kv : g.n_head_kv_full;
  l.head_dim = l.sliding ? s.head_dim : g.head_dim_full;
  l.ff = !l.own_kv && g.ff_shared ? g.ff_shared : s.ff;
  l.has_v = l.own_kv && !(g.full_k_is_v && !l.sliding);
  return l;
}

Value u32_array(const std::vector<uint32_t>& v) {
  std::vector<Value> items;
  for (uint32_t x : v) items.push_back(Value::u32(x));
  return Value::array(gguf::ValueType::U32, std::move(items));
}

}  // namespace

Status check_gemma4_shape(const Shape& s) {
  const Gemma4Shape& g = s.gemma4;
  if (g.period < 2 || s.n_layer < g.period)
    return Error{"synth: gemma4 needs a pattern period of 2 or more and at least one full layer (period " +
                 std::to_string(g.period) + ", " + std::to_string(s.n_layer) + " layers)"};
  if (s.n_head_kv == 0 || g.n_head_kv_full == 0 || s.n_head % s.n_head_kv != 0 || s.n_head % g.n_head_kv_full != 0)
    return Error{"synth: gemma4 KV heads " + std::to_string(s.n_head_kv) + " / " + std::to_string(g.n_head_kv_full) +
                 " must divide the " + std::to_string(s.n_head) + " heads"};
  if (g.n_kv_shared > 0) {
    // llama.cpp's rule: shared sliding layers read layer kv0 - 2, full ones kv0 - 1.
    const uint32_t kv0 = s.n_layer - g.n_kv_shared;
    if (kv0 < 2 || !layer_of(s, model::gemma4_kv_source(kv0, true)).sliding ||
        layer_of(s, model::gemma4_kv_source(kv0, false)).sliding)
      return Error{"synth: gemma4 with " + std::to_string(g.n_kv_shared) + " KV-shared layers of " +
                   std::to_string(s.n_layer) + " needs layer " + std::to_string(kv0 - 2) + " sliding and layer " +
                   std::to_string(kv0 - 1) + " full"};
  }
  if (s.n_expert > 0 && (s.expert_ff == 0 || s.n_expert_used == 0))
    return Error{"synth: gemma4 experts need expert_ff and experts used per token"};
  return {};
}

void set_gemma4_metadata(gguf::Writer& w, const Shape& s, const std::string& name, uint32_t file_type) {
  const Gemma4Shape& g = s.gemma4;
  const std::string a = "gemma4.";
  std::vector<uint32_t> ff, kv;
  std::vector<Value> pattern;
  for (uint32_t il = 0; il < s.n_layer; ++il) {
    const Layer l = layer_of(s, il);
    ff.push_back(l.ff);
    kv.push_back(l.n_head_kv);
    pattern.push_back(Value::boolean(l.sliding));
  }
  const bool ff_uniform = std::all_of(ff.begin(), ff.end(), [&](uint32_t x) { return x == ff[0]; });
  const bool kv_uniform = std::all_of(kv.begin(), kv.end(), [&](uint32_t x) { return x == kv[0]; });
  w.set("general.architecture", Value::string("gemma4"));
  w.set("general.name", Value::string(name));
  w.set("general.alignment", Value::u32(32));
  w.set("general.file_type", Value::u32(file_type));
  w.set(a + "block_count", Value::u32(s.n_layer));
  w.set(a + "context_length", Value::u32(s.context));
  w.set(a + "embedding_length", Value::u32(s.d_model));
  w.set(a + "feed_forward_length", ff_uniform ? Value::u32(ff[0]) : u32_array(ff));
  w.set(a + "attention.head_count", Value::u32(s.n_head));
  w.set(a + "attention.head_count_kv", kv_uniform ? Value::u32(kv[0]) : u32_array(kv));
  w.set(a + "rope.freq_base", Value::f32(float(s.rope_base)));
  w.set(a + "rope.freq_base_swa", Value::f32(float(g.rope_base_swa)));
  w.set(a + "attention.layer_norm_rms_epsilon", Value::f32(float(s.rms_eps)));
  if (s.n_expert > 0) {
    w.set(a + "expert_count", Value::u32(s.n_expert));
    w.set(a + "expert_used_count", Value::u32(s.n_expert_used));
  }
  w.set(a + "attention.key_length", Value::u32(g.head_dim_full));
  w.set(a + "attention.value_length", Value::u32(g.head_dim_full));
  w.set(a + "attention.sliding_window", Value::u32(g.window));
  w.set(a + "final_logit_softcapping", Value::f32(float(g.softcap)));
  w.set(a + "attention.shared_kv_layers", Value::u32(g.n_kv_shared));
  w.set(a + "embedding_length_per_layer_input", Value::u32(g.ple));
  w.set(a + "attention.sliding_window_pattern", Value::array(gguf::ValueType::BOOL, std::move(pattern)));
  w.set(a + "attention.key_length_swa", Value::u32(s.head_dim));
  w.set(a + "attention.value_length_swa", Value::u32(s.head_dim));
  if (s.n_expert > 0) w.set(a + "expert_feed_forward_length", Value::u32(s.expert_ff));
  w.set(a + "rope.dimension_count", Value::u32(g.head_dim_full));
  w.set(a + "rope.dimension_count_swa", Value::u32(s.head_dim));
}

std::vector<Planned> plan_gemma4_tensors(const Shape& s, GgmlType type, std::optional<Mix> mix, uint64_t n_vocab) {
  const Gemma4Shape& g = s.gemma4;
  std::vector<Planned> p;
  const uint64_t d = s.d_model, P = g.ple, L = s.n_layer;
  const MixModel mm{.n_layer = s.n_layer, .n_head = s.n_head, .n_head_kv = s.n_head_kv, .n_expert = s.n_expert};
  auto mat = [&](std::string name, uint64_t n_in, uint64_t n_out, uint64_t n_exp = 0) {
    std::vector<uint64_t> shape{n_in, n_out};
    if (n_exp) shape.push_back(n_exp);
    GgmlType t = mix ? mix_tensor_type(*mix, mm, name, shape) : type;
    // Rows that do not fill a block stay f16, as llama.cpp's converter writes them.
    if (n_in % gguf::type_info(t)->block_elems != 0) t = GgmlType::F16;
    p.push_back({std::move(name), t, std::move(shape), Planned::Matrix, 1.0f / std::sqrt(float(n_in))});
  };
  auto norm = [&](std::string name, uint64_t n) { p.push_back({std::move(name), GgmlType::F32, {n}, Planned::Norm}); };
  auto router = [&](std::string name, uint64_t n_in, uint64_t n_out) {
    p.push_back({std::move(name), GgmlType::F32, {n_in, n_out}, Planned::Router, 1.0f / std::sqrt(float(n_in))});
  };
  mat("token_embd.weight", d, n_vocab);
  if (P > 0) {
    mat("per_layer_token_embd.weight", P * L, n_vocab);
    mat("per_layer_model_proj.weight", d, P * L);
    norm("per_layer_proj_norm.weight", P);
  }
  for (uint32_t il = 0; il < s.n_layer; ++il) {
    const Layer l = layer_of(s, il);
    const std::string b = "blk." + std::to_string(il) + ".";
    const uint64_t q = uint64_t(s.n_head) * l.head_dim, kv = uint64_t(l.n_head_kv) * l.head_dim;
    norm(b + "attn_norm.weight", d);
    mat(b + "attn_q.weight", d, q);
    if (l.own_kv) mat(b + "attn_k.weight", d, kv);
    if (l.has_v) mat(b + "attn_v.weight", d, kv);
    mat(b + "attn_output.weight", q, d);
    norm(b + "attn_q_norm.weight", l.head_dim);
    if (l.own_kv) norm(b + "attn_k_norm.weight", l.head_dim);
    norm(b + "post_attention_norm.weight", d);
    norm(b + "layer_output_scale.weight", 1);
    norm(b + "ffn_norm.weight", d);
    mat(b + "ffn_gate.weight", d, l.ff);
    mat(b + "ffn_up.weight", d, l.ff);
    mat(b + "ffn_down.weight", l.ff, d);
    norm(b + "post_ffw_norm.weight", d);
    if (s.n_expert > 0) {
      router(b + "ffn_gate_inp.weight", d, s.n_expert);
      norm(b + "ffn_gate_inp.scale", d);
      norm(b + "pre_ffw_norm_2.weight", d);
      norm(b + "post_ffw_norm_1.weight", d);
      norm(b + "post_ffw_norm_2.weight", d);
      mat(b + "ffn_gate_up_exps.weight", d, 2 * uint64_t(s.expert_ff), s.n_expert);
      mat(b + "ffn_down_exps.weight", s.expert_ff, d, s.n_expert);
      norm(b + "ffn_down_exps.scale", s.n_expert);
    }
    if (P > 0) {
      mat(b + "inp_gate.weight", d, P);
      mat(b + "proj.weight", P, d);
      norm(b + "post_norm.weight", d);
    }
  }
  norm("output_norm.weight", d);
  // Full layers rotate a quarter of their pairs ("proportional" RoPE): the other frequencies are divided by 1e30.
  const uint64_t pairs = g.head_dim_full / 2;
  Planned f{"rope_freqs.weight", GgmlType::F32, {pairs}, Planned::Values};
  for (uint64_t i = 0; i < pairs; ++i) f.values.push_back(i < pairs / 4 ? 1.0f : 1e30f);
  p.push_back(std::move(f));
  return p;
}

std::optional<Shape> gemma4_preset(const std::string& name) {
  Shape s;
  s.arch = "gemma4";
  s.rope_base = 1e6;
  s.rms_eps = 1e-6;
  s.head_dim = 256;
  s.gemma4.head_dim_full = 512;
  if (name == "26b-a4b") {  // Gemma 4 26B-A4B: 5 x [5 sliding, 1 full], a dense MLP beside 128 experts top-8
    s.n_layer = 30, s.d_model = 2816, s.n_head = 16, s.n_head_kv = 8, s.ff = 2112;
    s.n_expert = 128, s.n_expert_used = 8, s.expert_ff = 704;
    s.gemma4 = {.period = 6, .head_dim_full = 512, .n_head_kv_full = 2, .window = 1024, .full_k_is_v = true};
    return s;
  }
  if (name == "e2b") {  // Gemma 4 E2B: 7 x [4 sliding, 1 full], per-layer embeddings, the last 20 layers share KV
    s.n_layer = 35, s.d_model = 1536, s.n_head = 8, s.n_head_kv = 1, s.ff = 6144;
    s.gemma4 = {.period = 5, .head_dim_full = 512, .n_head_kv_full = 1, .window = 512, .n_kv_shared = 20,
                .ple = 256, .ff_shared = 12288};
    return s;
  }
  if (name == "tiny") {  // the 26B-A4B layout in miniature
    s.n_layer = 6, s.d_model = 128, s.n_head = 2, s.n_head_kv = 2, s.ff = 128;
    s.n_expert = 16, s.n_expert_used = 8, s.expert_ff = 64;
    s.gemma4 = {.period = 6, .head_dim_full = 512, .n_head_kv_full = 1, .window = 64, .full_k_is_v = true};
    return s;
  }
  if (name == "tiny-e2b") {  // the E2B layout in miniature: two periods, so that both kinds of layer share KV
    s.n_layer = 10, s.d_model = 64, s.n_head = 2, s.n_head_kv = 1, s.ff = 128;
    s.gemma4 = {.period = 5, .head_dim_full = 512, .n_head_kv_full = 1, .window = 32, .n_kv_shared = 5,
                .ple = 32, .ff_shared = 256};
    return s;
  }
  return std::nullopt;
}

std::vector<std::string> gemma4_preset_names() { return {"tiny", "tiny-e2b", "26b-a4b", "e2b"}; }

}  // namespace df::synth
