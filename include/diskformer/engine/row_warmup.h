// Which rows of a per-token table (the per-layer embeddings) a row cache loads at open: the id ranges that real
// text uses most. Vocabularies number their merged pieces roughly by frequency, so the lowest ids come first;
// then the blocks of single-character tokens (the pieces every script falls back to), longest first.
#pragma once

#include <cstdint>
#include <vector>

#include "diskformer/cache/row_cache.h"
#include "diskformer/gguf/reader.h"

namespace df::engine {

// At most `budget` rows of ids below `rows`, in disjoint ranges: half the budget from id 0, the rest from runs of 16
// or more consecutive single-character tokens of the vocabulary in `vocab` (tokenizer.ggml.tokens; where it has
// none, low ids take the whole budget).
std::vector<cache::RowRange> warm_row_ranges(const gguf::File& vocab, uint64_t rows, uint64_t budget);

}  // namespace df::engine
