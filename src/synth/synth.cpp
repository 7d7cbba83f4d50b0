#include "diskformer/synth/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <thread>

#include "diskformer/backend/cpu/numeric.h"
#include "diskformer/gguf/reader.h"
#include "diskformer/gguf/writer.h"
#include "diskformer/model/arch_metadata.h"
#include "diskformer/util/check.h"
#include "synth/planned.h"
#include "synth/rng.h"

namespace df::synth {

namespace {

using gguf::GgmlType;
using gguf::Value;
using cpu::f32_to_bf16;
using cpu::f32_to_f16;

}  // namespace

namespace {

std::vector<Planned> plan_tensors(const Shape& s, GgmlType type, std::optional<Mix> mix, uint64_t n_vocab) {
  std::vector<Planned> p;
  const uint64_t d = s.d_model, q_dim = uint64_t{s.n_head} * s.head_dim, kv_dim = uint64_t{s.n_head_kv} * s.head_dim;
  const MixModel mm{.n_layer = s.n_layer, .n_head = s.n_head, .n_head_kv = s.n_head_kv, .n_expert = s.n_expert};
  auto mat = [&](std::string name, uint64_t n_in, uint64_t n_out, uint64_t n_exp = 0) {
    std::vector<uint64_t> shape{n_in, n_out};
    if (n_exp) shape.push_back(n_exp);
    const GgmlType t = mix ? mix_tensor_type(*mix, mm, name, shape) : type;
    p.push_back({std::move(name), t, std::move(shape), Planned::Matrix, 1.0f / std::sqrt(static_cast<float>(n_in))});
  };
  auto norm = [&](std::string name, uint64_t n) {
    p.push_back({std::move(name), GgmlType::F32, {n}, Planned::Norm, 0.0f});
  };
  mat("token_embd.weight", d, n_vocab);
  for (uint32_t l = 0; l < s.n_layer; ++l) {
    std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", d);
    mat(b + "attn_q.weight", d, q_dim);
    mat(b + "attn_k.weight", d, kv_dim);
    mat(b + "attn_v.weight", d, kv_dim);
    mat(b + "attn_output.weight", q_dim, d);
    if (s.arch == "qwen3" || s.arch == "qwen3moe") {
      norm(b + "attn_q_norm.weight", s.head_dim);
      norm(b + "attn_k_norm.weight", s.head_dim);
    }
    norm(b + "ffn_norm.weight", d);
    if (s.n_expert > 0) {
      uint64_t eff = s.arch == "qwen3moe" ? s.expert_ff : s.ff;
      p.push_back({b + "ffn_gate_inp.weight", GgmlType::F32, {d, s.n_expert}, Planned::Router,
                   1.0f / std::sqrt(static_cast<float>(d))});
      mat(b + "ffn_gate_exps.weight", d, eff, s.n_expert);
      mat(b + "ffn_up_exps.weight", d, eff, s.n_expert);
      mat(b + "ffn_down_exps.weight", eff, d, s.n_expert);
    } else {
      mat(b + "ffn_gate.weight", d, s.ff);
      mat(b + "ffn_up.weight", d, s.ff);
      mat(b + "ffn_down.weight", s.ff, d);
    }
  }
  norm("output_norm.weight", d);
  mat("output.weight", d, n_vocab);  // a separate head, as in the shared models
  return p;
}

// Appends unused tokens "[PADn]" to the copied vocabulary up to n rows, as llama.cpp's converter does for models
// whose embeddings have more rows than their tokenizer has tokens.
void pad_vocabulary(gguf::Writer& w, const gguf::File& tok, uint64_t n) {
  auto extend = [&](const char* key, const std::function<Value(uint64_t)>& make) {
    const gguf::Value* v = tok.find(key);
    if (!v || !v->array()) return;
    gguf::Array a = *v->array();
    for (uint64_t i = a.items.size(); i < n; ++i) a.items.push_back(make(i));
    w.set(key, Value::array(a.elem_type, std::move(a.items)));
  };
  extend("tokenizer.ggml.tokens", [](uint64_t i) { return Value::string("[PAD" + std::to_string(i) + "]"); });
  extend("tokenizer.ggml.token_type", [](uint64_t) { return Value::i32(5); });  // unused
  extend("tokenizer.ggml.scores", [](uint64_t) { return Value::f32(0.0f); });
}

// Fixed-size generation chunks, each seeded from (seed, tensor, chunk): the output does not depend on threads.
constexpr uint64_t kChunkBlocks = 1 << 14;

}  // namespace

Status write_model(const Options& o) {
  const Shape& s = o.shape;
  const bool gemma4 = s.arch == "gemma4";
  const bool hybrid = s.arch == "qwen35moe";
  if (s.arch != "qwen3moe" && s.arch != "qwen3" && s.arch != "llama" && !gemma4 && !hybrid)
    return Error{"synth: unsupported architecture '" + s.arch + "' (qwen3moe, qwen3, llama, gemma4, qwen35moe)"};
  if (gemma4) DF_TRY(check_gemma4_shape(s));
  if (hybrid && (s.n_expert == 0 || s.expert_ff == 0 || s.shared_ff == 0 || s.full_attention_interval == 0 ||
                 s.ssm_conv < 2 || s.ssm_state == 0 || s.ssm_k_heads == 0 || s.ssm_v_heads % s.ssm_k_heads != 0))
    return Error{"synth: qwen35moe needs experts, a shared expert, an attention interval and DeltaNet sizes "
                 "(v heads a multiple of k heads)"};
  if (hybrid && s.n_rot != 64)
    return Error{"synth: qwen35moe's rope sections (11, 11, 10) cover 64 rotary dims; n_rot is " +
                 std::to_string(s.n_rot)};
  if (!o.mix && !supported_type(o.type))
    return Error{"synth: cannot generate type " + std::string(gguf::type_name(o.type)) +
                 " (q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs, f16, bf16)"};
  if (s.arch == "qwen3moe" && (s.n_expert == 0 || s.expert_ff == 0))
    return Error{"synth: qwen3moe needs experts (n_expert and expert_ff)"};
  if (s.n_expert > 0 && (s.n_expert_used == 0 || s.n_expert_used > s.n_expert))
    return Error{"synth: experts used per token must be between 1 and " + std::to_string(s.n_expert)};
  if (s.n_head_kv == 0 || s.n_head % s.n_head_kv != 0)
    return Error{"synth: head count " + std::to_string(s.n_head) + " is not a multiple of kv heads " +
                 std::to_string(s.n_head_kv)};
  // A mix moves rows that do not fill a block to another type, as llama.cpp's quantizer does.
  const uint32_t block = o.mix ? 1 : gguf::type_info(o.type)->block_elems;
  std::vector<uint64_t> dims = {s.d_model, uint64_t{s.n_head} * s.head_dim, s.ff, s.expert_ff, s.shared_ff,
                                 uint64_t{s.ssm_v_heads} * s.ssm_state};
  if (gemma4)
    for (uint64_t d : {uint64_t{s.n_head} * s.gemma4.head_dim_full, uint64_t{s.gemma4.ple}, uint64_t{s.gemma4.ff_shared}})
      dims.push_back(d);
  for (uint64_t dim : dims)
    if (dim % block != 0)
      return Error{"synth: dimension " + std::to_string(dim) + " is not a multiple of the " +
                   std::string(gguf::type_name(o.type)) + " block of " + std::to_string(block)};

  DF_ASSIGN(gguf::File tok, gguf::read_file(o.tokenizer_from));
  DF_ASSIGN(const gguf::Array* tokens, tok.get_array("tokenizer.ggml.tokens"));
  const uint64_t n_tokens = tokens->items.size();
  if (n_tokens == 0) return Error{o.tokenizer_from + ": tokenizer.ggml.tokens is empty"};
  if (s.n_vocab && s.n_vocab < n_tokens)
    return Error{"synth: the shape's vocabulary of " + std::to_string(s.n_vocab) + " rows is smaller than " +
                 o.tokenizer_from + "'s " + std::to_string(n_tokens) + " tokens"};
  const uint64_t n_vocab = std::max(n_tokens, s.n_vocab);

  DF_ASSIGN(gguf::Writer w, gguf::Writer::create(o.out));
  const std::string name = "synthetic " + s.arch + " seed " + std::to_string(o.seed);
  if (gemma4) {
    set_gemma4_metadata(w, s, name, o.mix ? uint32_t(*o.mix) : model::file_type_code(o.type));
  } else {
    model::set_arch_metadata(w, {.arch = s.arch,
                        .name = name,
                        .file_type = o.type,
                        .ftype = o.mix ? uint32_t(*o.mix) : 0,
                        .n_layer = s.n_layer,
                        .context = s.context,
                        .n_embd = s.d_model,
                        .n_ff = s.ff,
                        .n_head = s.n_head,
                        .n_head_kv = s.n_head_kv,
                        .head_dim = s.head_dim,
                        .n_expert = s.n_expert,
                        .n_expert_used = s.n_expert_used,
                        .n_ff_expert = s.expert_ff,
                        .rope_base = s.rope_base,
                        .rms_eps = s.rms_eps,
                        .n_vocab = n_vocab,
                        .hybrid = {.n_ff_shared = s.shared_ff,
                                   .full_attention_interval = s.full_attention_interval,
                                   .n_rot = s.n_rot,
                                   .rope_sections = {11, 11, 10, 0},  // Qwen3.5/3.6's (mrope_section)
                                   .ssm_conv = s.ssm_conv,
                                   .ssm_state = s.ssm_state,
                                   .ssm_k_heads = s.ssm_k_heads,
                                   .ssm_v_heads = s.ssm_v_heads}});
  }
  model::copy_tokenizer_metadata(w, tok);
  if (n_vocab > n_tokens) pad_vocabulary(w, tok, n_vocab);

  auto tensors = gemma4   ? plan_gemma4_tensors(s, o.type, o.mix, n_vocab)
                 : hybrid ? plan_qwen35moe_tensors(s, o.type, o.mix, n_vocab)
                          : plan_tensors(s, o.type, o.mix, n_vocab);
  for (const auto& t : tensors) DF_TRY(w.add_tensor(t.name, t.type, t.shape));
  DF_TRY(w.write_header());

  const unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  const uint64_t total = w.total_data_bytes();
  // Generate a batch of chunks in parallel while the previous batch is being written.
  constexpr uint64_t kBatchBytes = 64ull << 20;
  std::vector<uint8_t> bufs[2];
  std::future<Status> pending;
  int cur = 0;
  uint64_t done = 0;
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const Planned& t = tensors[ti];
    const auto* info = gguf::type_info(t.type);
    uint64_t n = 1;
    for (uint64_t dim : t.shape) n *= dim;
    const uint64_t n_bytes = n / info->block_elems * info->block_bytes;
    if (t.kind != Planned::Matrix && t.kind != Planned::Router) {
      // Norm weights near 1, as trained models have them; other f32 vectors from their range, or the values given.
      std::vector<float> v(n);
      Rng rng{mix(o.seed, ti)};
      for (auto& x : v)
        x = t.kind == Planned::Norm ? 0.9f + 0.2f * rng.uniform() : t.lo + (t.hi - t.lo) * rng.uniform();
      if (t.kind == Planned::Values) v = t.values;
      if (pending.valid()) DF_TRY(pending.get());
      DF_TRY(w.write_data(v.data(), v.size() * 4));
      done += n_bytes;
      continue;
    }
    const uint64_t chunk_bytes = kChunkBlocks * info->block_bytes;
    const uint64_t chunks_per_batch = std::max<uint64_t>(1, kBatchBytes / chunk_bytes);
    for (uint64_t c0 = 0; c0 * chunk_bytes < n_bytes; c0 += chunks_per_batch) {
      const uint64_t begin = c0 * chunk_bytes;
      const uint64_t end = std::min(n_bytes, (c0 + chunks_per_batch) * chunk_bytes);
      auto& buf = bufs[cur];
      buf.resize(end - begin);
      std::vector<std::thread> pool;
      const uint64_t n_chunks = (end - begin + chunk_bytes - 1) / chunk_bytes;
      for (unsigned th = 0; th < threads; ++th)
        pool.emplace_back([&, th] {
          for (uint64_t c = th; c < n_chunks; c += threads) {
            uint64_t off = c * chunk_bytes;
            uint64_t len = std::min(chunk_bytes, end - begin - off);
            fill_random(t.type, t.stddev, mix(mix(o.seed, ti + 1), c0 + c), buf.data() + off, len);
          }
        });
      for (auto& th : pool) th.join();
      if (pending.valid()) DF_TRY(pending.get());
      pending = std::async(std::launch::async, [&w, &buf] { return w.write_data(buf.data(), buf.size()); });
      cur ^= 1;
      done += end - begin;
      if (o.progress) o.progress(done, total);
    }
  }
  if (pending.valid()) DF_TRY(pending.get());
  return w.finish();
}

std::optional<Shape> preset(const std::string& arch, const std::string& name) {
  if (arch == "gemma4") return gemma4_preset(name);
  Shape s;
  s.arch = arch;
  if (arch == "qwen3moe") {
    s.n_expert = 16, s.n_expert_used = 4, s.expert_ff = 64, s.ff = 256;
    if (name == "tiny") return s;
    if (name == "2g") {  // about 2 GiB in Q4_0: a CPU benchmark that does not fit a small cache
      s.n_layer = 32, s.d_model = 1024, s.n_head = 16, s.n_head_kv = 4, s.head_dim = 64;
      s.n_expert = 64, s.n_expert_used = 8, s.expert_ff = 512, s.ff = 2816;
      return s;
    }
    if (name == "qwen3-30b-a3b") {  // Qwen3-30B-A3B's exact shape
      s.n_layer = 48, s.d_model = 2048, s.n_head = 32, s.n_head_kv = 4, s.head_dim = 128;
      s.n_expert = 128, s.n_expert_used = 8, s.expert_ff = 768, s.ff = 6144, s.context = 40960;
      return s;
    }
  } else if (arch == "qwen35moe") {
    // The real per-head sizes, rotary dims, DeltaNet heads and layer pattern at a small width.
    s.n_layer = 8, s.d_model = 64, s.n_head = 2, s.n_head_kv = 1, s.head_dim = 256, s.n_rot = 64;
    s.n_expert = 16, s.n_expert_used = 4, s.expert_ff = 32, s.shared_ff = 32, s.ff = 0;
    s.full_attention_interval = 4, s.ssm_conv = 4, s.ssm_state = 128, s.ssm_k_heads = 2, s.ssm_v_heads = 4;
    s.rope_base = 1e7;
    if (name == "tiny") return s;
    if (name == "qwen3.6-35b-a3b") {  // Qwen3.6-35B-A3B's published shape (without its MTP block)
      s.n_layer = 40, s.d_model = 2048, s.n_head = 16, s.n_head_kv = 2;
      s.n_expert = 256, s.n_expert_used = 8, s.expert_ff = 512, s.shared_ff = 512;
      s.ssm_k_heads = 16, s.ssm_v_heads = 32, s.n_vocab = 248320, s.context = 262144;
      return s;
    }
  } else if (arch == "qwen3") {
    if (name == "tiny") return s;
    if (name == "small") {
      s.n_layer = 8, s.d_model = 512, s.n_head = 8, s.n_head_kv = 2, s.head_dim = 64, s.ff = 1536;
      return s;
    }
  } else if (arch == "llama") {
    s.rope_base = 10000, s.rms_eps = 1e-6;
    if (name == "tiny") return s;
    if (name == "mixtral-tiny") {  // Mixtral layout: 8 experts, top-2, llama attention
      s.d_model = 128, s.n_head = 4, s.n_head_kv = 2, s.n_expert = 8, s.n_expert_used = 2, s.rope_base = 1e6;
      return s;
    }
    if (name == "small") {
      s.n_layer = 8, s.d_model = 512, s.n_head = 8, s.n_head_kv = 2, s.head_dim = 64, s.ff = 1536;
      return s;
    }
  }
  return std::nullopt;
}

std::vector<std::string> preset_names(const std::string& arch) {
  if (arch == "qwen3moe") return {"tiny", "2g", "qwen3-30b-a3b"};
  if (arch == "qwen35moe") return {"tiny", "qwen3.6-35b-a3b"};
  if (arch == "qwen3") return {"tiny", "small"};
  if (arch == "llama") return {"tiny", "mixtral-tiny", "small"};
  if (arch == "gemma4") return gemma4_preset_names();
  return {};
}

}  // namespace df::synth
