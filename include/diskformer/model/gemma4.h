// gemma4 as llama.cpp reads it (its src/models/gemma4.cpp, ../shared/docs/ARCHS.md): the spec from the metadata and
// the tensors. Its layers follow a pattern of sliding-window and full attention with their own head sizes, KV heads
// and RoPE (the full layers rotate by frequencies divided by rope_freqs); the last shared_kv_layers layers have no
// K/V of their own and attend to the cache of the last earlier layer of their type; every layer has a dense GELU
// MLP, beside routed experts in the 26B-A4B layout (gate and up fused in one tensor, a scale per expert) or a
// per-layer embedding (PLE) input in the E2B layout.
#pragma once

#include "diskformer/gguf/reader.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/util/result.h"

namespace df::model {

// Errors name the file and the key: a missing required key, an array of the wrong length, head sizes of a layer
// type whose keys and values differ, a shared layer whose source has another shape.
Result<ModelSpec> gemma4_spec_from_gguf(const gguf::File& f);

// The tensors of every layer as its type and the spec say (layers that share KV have no attn_k/attn_v/attn_k_norm;
// attn_v is optional where K doubles as V); errors name the file, the tensor and its offset.
Result<ModelTensors> bind_gemma4_tensors(const gguf::File& f, const ModelSpec& spec);

// The layer whose KV cache a gemma4 layer at or past the first shared one reads: the last layer before the shared
// ones of the same kind (sliding: kv0 - 2, full: kv0 - 1, as llama.cpp's reuse rule).
uint32_t gemma4_kv_source(uint32_t kv0, bool sliding);

}  // namespace df::model
