#include "diskformer/engine/row_warmup.h"

#include <algorithm>

namespace df::engine {

namespace {

constexpr uint64_t kMinRun = 16;

// One UTF-8 code point (a plain piece, not a byte token's "<0xNN>" name).
bool single_character(const std::string& s) {
  if (s.empty()) return false;
  const auto c = static_cast<unsigned char>(s[0]);
  const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  return len != 0 && len == s.size();
}

}  // namespace

std::vector<cache::RowRange> warm_row_ranges(const gguf::File& vocab, uint64_t rows, uint64_t budget) {
  budget = std::min(budget, rows);
  if (budget == 0) return {};
  const uint64_t low = std::max<uint64_t>(1, budget / 2);
  std::vector<cache::RowRange> out = {{0, low}};
  uint64_t left = budget - low;

  // Runs of single-character normal tokens past the low range.
  std::vector<cache::RowRange> runs;
  auto tokens = vocab.get_array("tokenizer.ggml.tokens");
  auto types = vocab.get_array("tokenizer.ggml.token_type");
  if (tokens.ok()) {
    const auto& items = (*tokens)->items;
    const uint64_t n = std::min<uint64_t>(rows, items.size());
    uint64_t start = low;
    for (uint64_t id = low; id <= n; ++id) {
      bool single = false;
      if (id < n) {
        const std::string* s = items[id].str();
        const bool normal = !types.ok() || id >= (*types)->items.size() ||
                            (*types)->items[id].to_i64().value_or(1) == 1;
        single = s && normal && single_character(*s);
      }
      if (!single) {
        if (id - start >= kMinRun) runs.push_back({start, id - start});
        start = id + 1;
      }
    }
  }
  std::stable_sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.count > b.count; });
  for (const cache::RowRange& r : runs) {
    if (left == 0) break;
    const uint64_t take = std::min(left, r.count);
    out.push_back({r.first, take});
    left -= take;
  }
  // The rest to the next low ids.
  if (left > 0) {
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    uint64_t id = low;
    std::vector<cache::RowRange> extra;
    size_t i = 1;
    while (left > 0 && id < rows) {
      // Skip ranges already taken.
      while (i < out.size() && out[i].first + out[i].count <= id) ++i;
      if (i < out.size() && out[i].first <= id) {
        id = out[i].first + out[i].count;
        continue;
      }
      const uint64_t end = std::min(rows, i < out.size() ? out[i].first : rows);
      const uint64_t take = std::min(left, end - id);
      extra.push_back({id, take});
      left -= take;
      id += take;
    }
    out.insert(out.end(), extra.begin(), extra.end());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // Adjacent ranges as one read.
  std::vector<cache::RowRange> merged;
  for (const cache::RowRange& r : out) {
    if (!merged.empty() && merged.back().first + merged.back().count == r.first) {
      merged.back().count += r.count;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

}  // namespace df::engine
