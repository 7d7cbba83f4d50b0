// What the engine makes of a model's metadata (model::ModelSpec), for inspect: the family's shape in a few lines,
// and for families whose layers differ (gemma4) a line per layer: attention kind, heads, head size, RoPE, whose KV
// it reads, feed-forward width.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "diskformer/gguf/reader.h"

namespace df::cli {

// Text lines (a "spec:" section), or the reason the metadata gives no spec; "" for vocabulary-only files.
std::string spec_text(const gguf::File& f);
// The same as a JSON object (null for vocabulary-only files; {"error": ...} where the spec is refused).
nlohmann::json spec_json(const gguf::File& f);

}  // namespace df::cli
