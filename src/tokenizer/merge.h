// The pair merging both subword models run (llama.cpp's llm_symbol lists): a word split into UTF-8 characters as
// a linked list of symbols, adjacent pairs queued by the model's preference (BPE merge rank, SentencePiece score),
// merged best first.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/utf8.h"

namespace df::tokenizer {

struct Symbol {
  int prev, next;
  uint32_t off, n;  // bytes of the text; n == 0 once merged into its left neighbour
};

// Appends the UTF-8 characters of text (a truncated sequence at the end as its own symbol) as linked symbols.
inline void split_chars(std::string_view text, std::vector<Symbol>& symbols) {
  uint32_t off = 0;
  const uint32_t size = static_cast<uint32_t>(text.size());
  int index = 0;
  while (off < size) {
    const uint32_t len = std::min<uint32_t>(size - off, static_cast<uint32_t>(utf8::seq_len(text[off])));
    symbols.push_back({index - 1, off + len == size ? -1 : index + 1, off, len});
    off += len;
    ++index;
  }
}

// Queues every adjacent pair through add(left, right) (which queues it only where the model merges it), then
// merges from queue (a priority queue of entries with left, right and size: the pair's bytes when queued) until it
// is empty, queueing the new pairs around each merge.
template <typename Queue, typename Add>
void merge_pairs(std::vector<Symbol>& symbols, Queue& queue, Add add) {
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add(i - 1, i);
  while (!queue.empty()) {
    const auto b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Stale entries: one side merged away, or the right side grew since the pair was queued.
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    add(l.prev, b.left);
    add(b.left, l.next);
  }
}

}  // namespace df::tokenizer
