#include <queue>
#include <string>

#include "tokenizer/merge.h"
#include "tokenizer/models.h"
#include "tokenizer/utf8.h"

namespace df::tokenizer {

namespace {

struct Bigram {
  int left, right;
  int32_t rank;
  uint32_t size;  // bytes of left + right when queued
};

// Lowest rank first, then leftmost (llm_bigram_bpe::comparator).
struct Later {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

class WordMerger {
 public:
  explicit WordMerger(const Vocab& v) : v_(v) {}

  void run(const std::string& word, std::vector<int32_t>& out) {
    word_ = &word;
    symbols_.clear();
    queue_ = {};
    bool whole = false;
    if (v_.ignore_merges && v_.find(word) != kNoToken) whole = true;
    // gemma4: a newline run that is itself a token is taken whole, not merged pair by pair (llama.cpp's rule, so
    // that consecutive newlines come out as Gemma 4's reference tokenizer has them).
    if (v_.pre_type == PreType::Gemma4 && word.find_first_not_of('\n') == std::string::npos &&
        v_.find(word) != kNoToken)
      whole = true;
    if (whole) {
      symbols_.push_back({-1, -1, 0, static_cast<uint32_t>(word.size())});
    } else {
      split_chars(word, symbols_);
    }
    merge_pairs(symbols_, queue_, [this](int l, int r) { add_bigram(l, r); });

    for (const Symbol& s : symbols_) {
      if (s.n == 0) continue;
      std::string_view text(word.data() + s.off, s.n);
      int32_t id = v_.find(text);
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
      for (char c : text) {
        int32_t b = kNoToken;
        if (v_.byte_encode) {
          b = v_.find(std::string_view(&c, 1));
        } else {
          static const char* hex = "0123456789ABCDEF";
          const auto u = static_cast<uint8_t>(c);
          const char buf[6] = {'<', '0', 'x', hex[u >> 4], hex[u & 15], '>'};
          b = v_.find(std::string_view(buf, 6));
        }
        if (b != kNoToken) out.push_back(b);
      }
    }
  }

 private:
  void add_bigram(int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols_[left];
    const Symbol& r = symbols_[right];
    key_.assign(*word_, l.off, l.n);
    key_ += '\xff';
    key_.append(*word_, r.off, r.n);
    auto it = v_.merge_ranks.find(key_);
    if (it == v_.merge_ranks.end()) return;
    queue_.push({left, right, it->second, l.n + r.n});
  }

  const Vocab& v_;
  const std::string* word_ = nullptr;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, Later> queue_;
  std::string key_;
};

}  // namespace

void bpe_tokenize(const Vocab& vocab, const PreTokenizer& pre, std::string_view text, std::vector<int32_t>& out) {
  WordMerger merger(vocab);
  std::string encoded;
  for (const std::string& word : pre.split(text)) {
    if (!vocab.byte_encode) {
      merger.run(word, out);
      continue;
    }
    encoded.clear();
    for (unsigned char c : word) encoded += utf8::byte_to_unicode(c);
    merger.run(encoded, out);
  }
}

}  // namespace df::tokenizer
