// Models of real architectures with seeded random weights, for tests and benchmarks at any size.
// The files follow the tensor names and metadata keys llama.cpp loads; tensor data is generated in parallel and
// streamed to disk, so a 16 GiB model is written at disk speed without being held in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "diskformer/gguf/types.h"
#include "diskformer/synth/quant_mix.h"
#include "diskformer/util/result.h"

namespace df::synth {

// gemma4's own shape beyond Shape's common fields (there n_head_kv, head_dim and ff are the sliding layers'; with
// experts every layer has them beside its dense MLP).
struct Gemma4Shape {
  uint32_t period = 6;          // layers per group of sliding layers closed by one full layer
  uint32_t head_dim_full = 512;
  uint32_t n_head_kv_full = 1;
  uint32_t window = 1024;       // sliding_window
  uint32_t n_kv_shared = 0;     // the last layers that reuse earlier layers' KV
  uint32_t ple = 0;             // per-layer embedding width (0: none)
  uint32_t ff_shared = 0;       // dense width of the KV-shared layers (E2B's double-wide MLP); 0: ff
  bool full_k_is_v = false;     // full layers without attn_v (26B-A4B: K doubles as V)
  double rope_base_swa = 1e4;
  double softcap = 30;
};

struct Shape {
  std::string arch;            // "qwen3moe", "qwen3", "llama", "gemma4" or "qwen35moe"
  uint32_t n_layer = 4;
  uint32_t d_model = 64;
  uint32_t n_head = 2;
  uint32_t n_head_kv = 1;
  uint32_t head_dim = 32;
  uint32_t ff = 192;           // dense FFN width (qwen3moe: written as feed_forward_length, unused by its layers)
  uint32_t n_expert = 0;       // 0: dense FFN in every layer
  uint32_t n_expert_used = 0;
  uint32_t expert_ff = 0;      // routed expert FFN width (qwen3moe, gemma4); llama's Mixtral layout uses ff
  uint32_t context = 4096;
  double rope_base = 1e6;
  double rms_eps = 1e-6;
  Gemma4Shape gemma4;          // arch "gemma4" only
  // qwen35moe: Gated DeltaNet layers with a gated attention layer every full_attention_interval layers (whose heads
  // rotate their first n_rot dims), routed experts plus a shared expert.
  uint32_t shared_ff = 0;
  uint32_t full_attention_interval = 0;
  uint32_t n_rot = 0;
  uint32_t ssm_conv = 0, ssm_state = 0, ssm_k_heads = 0, ssm_v_heads = 0;  // kernel, head size, q/k and v heads
  // Rows of the embeddings and output head; 0: the tokenizer's vocabulary. A larger count pads the vocabulary with
  // unused tokens, as llama.cpp's converter pads a model's to its embedding rows.
  uint64_t n_vocab = 0;
};

// Preset names per architecture ("tiny", ..., "qwen3-30b-a3b"); nullopt when unknown.
std::optional<Shape> preset(const std::string& arch, const std::string& name);
std::vector<std::string> preset_names(const std::string& arch);

struct Options {
  Shape shape;
  gguf::GgmlType type = gguf::GgmlType::Q4_0;  // matrices; norms and routers are F32
  std::optional<Mix> mix;                       // set: each matrix's type by llama.cpp's rules for the mix (not type)
  std::string tokenizer_from;                   // GGUF whose tokenizer.* metadata is copied
  uint64_t seed = 1;
  std::string out;
  unsigned threads = 0;                         // 0: hardware concurrency
  // Called now and then with (bytes written, total bytes).
  std::function<void(uint64_t, uint64_t)> progress;
};

// Types synth can generate: q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, q2_K .. q6_K, iq4_xs, f16, bf16, f32.
bool supported_type(gguf::GgmlType t);

Status write_model(const Options& options);

// Fills `out` (n_bytes of tensor data of type t, a whole number of blocks) with symmetric random values whose
// standard deviation is about `stddev`; deterministic in `stream`. Exposed for tests.
void fill_random(gguf::GgmlType t, float stddev, uint64_t stream, uint8_t* out, uint64_t n_bytes);

}  // namespace df::synth
