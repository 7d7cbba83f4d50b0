#include <queue>
#include <string>

#include "tokenizer/merge.h"
#include "tokenizer/models.h"

namespace df::tokenizer {

namespace {

struct Bigram {
  int left, right;
  float score;
  uint32_t size;
};

// Highest score first, then leftmost (llm_bigram_spm::comparator).
struct Lower {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class Session {
 public:
  Session(const Vocab& v, std::string_view text) : v_(v), text_(text) {}

  void run(std::vector<int32_t>& out) {
    split_chars(text_, symbols_);
    if (symbols_.empty()) return;
    merge_pairs(symbols_, queue_, [this](int l, int r) { try_add(l, r); });
    for (int i = 0; i != -1; i = symbols_[i].next) resegment(symbols_[i], out);
  }

 private:
  std::string_view text_of(const Symbol& s) const { return text_.substr(s.off, s.n); }

  void try_add(int left, int right) {
    if (left < 0 || right < 0) return;
    std::string_view joined = text_.substr(symbols_[left].off, symbols_[left].n + symbols_[right].n);
    int32_t id = v_.find(joined);
    if (id == kNoToken) return;
    queue_.push({left, right, v_.tokens[id].score, static_cast<uint32_t>(joined.size())});
  }

  // A merged piece is a token by construction; a single character may not be, and then it is spelled in bytes.
  // (llama.cpp also keeps a map from merged text back to its two halves, but only consults it for a piece that
  // is not a token, which a merged piece never is, so the map is left out.)
  void resegment(const Symbol& s, std::vector<int32_t>& out) {
    std::string_view text = text_of(s);
    int32_t id = v_.find(text);
    if (id != kNoToken) {
      out.push_back(id);
      return;
    }
    for (char c : text) {
      int32_t b = spm_byte_token(v_, static_cast<uint8_t>(c));
      if (b == kNoToken) b = v_.unk;  // a vocabulary without byte tokens (llama.cpp would throw here)
      if (b != kNoToken) out.push_back(b);
    }
  }

  const Vocab& v_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, Lower> queue_;
};

}  // namespace

int32_t spm_byte_token(const Vocab& vocab, uint8_t byte) {
  static const char* hex = "0123456789ABCDEF";
  const char buf[6] = {'<', '0', 'x', hex[byte >> 4], hex[byte & 15], '>'};
  int32_t id = vocab.find(std::string_view(buf, 6));
  if (id != kNoToken) return id;
  const char c = static_cast<char>(byte);
  return vocab.find(std::string_view(&c, 1));
}

void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  Session(vocab, text).run(out);
}

}  // namespace df::tokenizer
