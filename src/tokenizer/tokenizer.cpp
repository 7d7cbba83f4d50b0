// Encode: cut special tokens out of the text (llama.cpp's tokenizer_st_partition), run the vocabulary's merge
// algorithm on the rest, add BOS/EOS.  Decode: per-token pieces (llama_token_to_piece), joined as
// llama_detokenize joins them.
#include "diskformer/tokenizer/tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "tokenizer/models.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace df::tokenizer {

namespace {

constexpr uint32_t kAttrSpecial = kAttrUnknown | kAttrControl;
constexpr std::string_view kSpaceMark = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space

bool is_c_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// A piece of the input: a special token, or a range of the text still to be tokenized.
struct Fragment {
  int32_t token = kNoToken;
  size_t off = 0, len = 0;
};

std::vector<Fragment> partition(const Vocab& v, std::string_view text, bool parse_special) {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({kNoToken, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t id : v.special_by_length) {
    const TokenData& t = v.tokens[id];
    if (!parse_special && (t.attr & kAttrSpecial)) continue;  // user-defined tokens split the text regardless
    const std::string& s = t.text;
    next.clear();
    bool changed = false;
    for (const Fragment& f : frags) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      size_t base = f.off, blen = f.len;
      while (true) {
        size_t m = text.substr(0, base + blen).find(s, base);
        if (m == std::string_view::npos) {
          if (blen > 0) next.push_back({kNoToken, base, blen});
          break;
        }
        changed = true;
        size_t left_len = m - base;
        if (t.attr & kAttrLstrip)
          while (left_len > 0 && is_c_space(text[base + left_len - 1])) --left_len;
        if (left_len > 0) next.push_back({kNoToken, base, left_len});
        next.push_back({id, 0, 0});
        if (m + s.size() >= base + blen) break;
        size_t roff = m + s.size();
        size_t rlen = blen - (m - base) - s.size();
        if (t.attr & kAttrRstrip)
          while (rlen > 0 && is_c_space(text[roff])) ++roff, --rlen;
        base = roff;
        blen = rlen;
      }
    }
    if (changed) frags.swap(next);
  }
  return frags;
}

// llama_decode_text: a byte-level token's text back to bytes; characters outside the alphabet are marked.
std::string decode_byte_level(const std::string& text) {
  std::string out;
  for (uint32_t cp : utf8::decode_lenient(text)) {
    int b = utf8::unicode_to_byte(cp);
    if (b >= 0) {
      out += static_cast<char>(b);
      continue;
    }
    std::string ch;
    utf8::append(ch, cp);
    out += "[UNK_BYTE_0x";
    char hex[4];
    for (unsigned char c : ch) {
      std::snprintf(hex, sizeof hex, "%02x", c);
      out += hex;
    }
    out += text + "]";
  }
  return out;
}

char byte_of_token(const std::string& text) {
  // "<0xXX>": llama.cpp reads the two hex digits after "<0x".
  std::string hex = text.size() >= 5 ? text.substr(3, 2) : std::string();
  return static_cast<char>(std::strtol(hex.c_str(), nullptr, 16));
}

// The piece a token prints with special tokens rendered (llama.cpp caches exactly this per token).
std::string render_piece(const Vocab& v, int32_t id) {
  const TokenData& t = v.tokens[id];
  if (t.attr & (kAttrSpecial | kAttrUserDefined)) return t.text;
  if (t.attr & kAttrNormal) {
    if (v.type == VocabType::Spm || v.escape_whitespaces) {
      std::string s = t.text;
      utf8::replace_all(s, kSpaceMark, " ");
      return s;
    }
    return decode_byte_level(t.text);
  }
  if (t.attr & kAttrByte) return std::string(1, byte_of_token(t.text));
  return {};  // undefined and unused tokens print nothing
}

// clean_up_tokenization_spaces, in place as llama_detokenize does it (each pass reads the partly rewritten
// buffer, which the third pass notices after a removed " ' ").
void clean_spaces(std::string& s) {
  size_t total = s.size();
  // " ?", " !", " .", " ," lose their space.
  size_t t1 = total;
  total = total ? 1 : 0;
  for (size_t i = 1; i < t1; ++i) {
    const char x = s[i];
    if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
    s[total++] = x;
  }
  // " ' " becomes "'".
  size_t t2 = total;
  total = total ? 1 : 0;
  for (size_t i = 1; i < t2; ++i) {
    const char x = s[i];
    if (x == '\'' && i + 1 < t2 && s[i - 1] == ' ' && s[i + 1] == ' ') {
      --total;
      s[++i] = '\0';
    }
    s[total++] = x;
  }
  // " 's", " 'm", " 're", " 've" lose their space.
  size_t t3 = total;
  total = total ? 1 : 0;
  for (size_t i = 1; i < t3; ++i) {
    const char x = s[i];
    if (s[i - 1] == ' ' && x == '\'' && i + 1 < t3) {
      const char x1 = s[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --total;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < t3) {
        const char x2 = s[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
      }
    }
    s[total++] = x;
  }
  s.resize(total);
}

}  // namespace

struct Tokenizer::Impl {
  Vocab vocab;
  std::optional<PreTokenizer> pre;  // BPE vocabularies
  std::vector<std::string> pieces;  // render_piece of every token

  void encode_text(std::string_view text, std::vector<int32_t>& out) const {
    if (vocab.escape_whitespaces && vocab.type == VocabType::Bpe) {
      std::string s(text);
      utf8::replace_all(s, " ", kSpaceMark);
      bpe_tokenize(vocab, *pre, s, out);
    } else {
      bpe_tokenize(vocab, *pre, text, out);
    }
  }
};

Result<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  auto impl = std::make_shared<Impl>();
  DF_ASSIGN(impl->vocab, Vocab::from_gguf(file));
  Vocab& v = impl->vocab;
  if (v.type == VocabType::Bpe) {
    auto pre = PreTokenizer::create(v.pre_type);
    if (!pre.ok()) return Error{file.path + ": tokenizer.ggml.pre: " + pre.error().message};
    impl->pre.emplace(std::move(pre).value());
  }
  impl->pieces.resize(v.n_vocab());
  for (int32_t id = 0; id < static_cast<int32_t>(v.n_vocab()); ++id) impl->pieces[id] = render_piece(v, id);

  Tokenizer tok(impl);
  // The newline token, as llama.cpp finds it.
  if (v.type == VocabType::Spm) {
    int32_t nl = spm_byte_token(v, '\n');
    v.linefeed = nl != kNoToken ? nl : v.pad;
  } else {
    std::vector<int32_t> ids;
    impl->encode_text("\n", ids);
    v.linefeed = ids.empty() ? v.pad : ids[0];
  }
  return tok;
}

Result<Tokenizer> Tokenizer::from_file(const std::string& gguf_path) {
  DF_ASSIGN(gguf::File file, gguf::read_file(gguf_path));
  return from_gguf(file);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  const Vocab& v = impl_->vocab;
  const bool add_bos = opts.add_bos.value_or(v.add_bos) && v.bos != kNoToken;
  const bool add_eos = opts.add_eos.value_or(v.add_eos) && v.eos != kNoToken;
  std::vector<int32_t> out;
  if (add_bos) out.push_back(v.bos);
  const std::vector<Fragment> frags = partition(v, text, opts.parse_special);
  if (v.type == VocabType::Spm) {
    bool prev_special = true;  // the text's start counts as "after a special token": it gets the space prefix
    std::string piece;
    for (const Fragment& f : frags) {
      if (f.token != kNoToken) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      piece.clear();
      if (v.add_space_prefix && prev_special) piece = " ";
      piece.append(text.substr(f.off, f.len));
      utf8::replace_all(piece, " ", kSpaceMark);
      spm_tokenize(v, piece, out);
      prev_special = false;
    }
  } else {
    for (const Fragment& f : frags) {
      if (f.token != kNoToken)
        out.push_back(f.token);
      else
        impl_->encode_text(text.substr(f.off, f.len), out);
    }
  }
  if (add_eos) out.push_back(v.eos);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special, int lstrip) const {
  const Vocab& v = impl_->vocab;
  if (!v.valid(id)) return {};
  if (!render_special && (v.tokens[id].attr & kAttrSpecial)) return {};
  const std::string& piece = impl_->pieces[id];
  size_t skip = 0;
  while (static_cast<int>(skip) < lstrip && skip < piece.size() && piece[skip] == ' ') ++skip;
  return piece.substr(skip);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& opts) const {
  const Vocab& v = impl_->vocab;
  bool remove_space = v.add_space_prefix;
  if (opts.remove_special && v.add_bos && !ids.empty() && ids.front() == v.bos) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (opts.remove_special && v.add_eos && !ids.empty() && ids.back() == v.eos) ids = ids.first(ids.size() - 1);
  std::string out;
  for (int32_t id : ids) {
    out += token_to_piece(id, opts.render_special, remove_space ? 1 : 0);
    remove_space = false;
  }
  if (opts.clean_spaces.value_or(v.clean_spaces)) clean_spaces(out);
  return out;
}

bool Tokenizer::is_eog(int32_t id) const { return id != kNoToken && impl_->vocab.eog.count(id) > 0; }
bool Tokenizer::is_control(int32_t id) const {
  return impl_->vocab.valid(id) && (impl_->vocab.tokens[id].attr & kAttrControl);
}
int32_t Tokenizer::bos() const { return impl_->vocab.bos; }
int32_t Tokenizer::eos() const { return impl_->vocab.eos; }
int32_t Tokenizer::eot() const { return impl_->vocab.eot; }
int32_t Tokenizer::unk() const { return impl_->vocab.unk; }
int32_t Tokenizer::pad() const { return impl_->vocab.pad; }
int32_t Tokenizer::nl() const { return impl_->vocab.linefeed; }
bool Tokenizer::add_bos() const { return impl_->vocab.add_bos; }
bool Tokenizer::add_eos() const { return impl_->vocab.add_eos; }
size_t Tokenizer::n_vocab() const { return impl_->vocab.n_vocab(); }
int32_t Tokenizer::find(std::string_view token_text) const { return impl_->vocab.find(token_text); }
const Vocab& Tokenizer::vocab() const { return impl_->vocab; }

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, StreamOptions opts) : tok_(tokenizer), opts_(opts) {}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_to_piece(id, opts_.render_special, opts_.strip_leading_space && first_ ? 1 : 0);
  first_ = false;
  const size_t n = utf8::complete_prefix(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace df::tokenizer
