// Text to token ids and back, exactly as llama.cpp does it for the same GGUF vocabulary.
//
//   auto tok = df::tokenizer::Tokenizer::from_gguf(file);          // Result<Tokenizer>
//   std::vector<int32_t> ids = tok->encode("Hello", {.parse_special = true});
//   df::tokenizer::StreamDecoder dec(*tok);
//   for (int32_t id : generated) std::fputs(dec.push(id).c_str(), stdout);
//   std::fputs(dec.flush().c_str(), stdout);
//
// Special tokens: control and unknown tokens (<|im_start|>, <s>, ...) are recognised inside text only with
// parse_special; otherwise their text is tokenized like any other text.  User-defined tokens (token_type 4) are
// always recognised, as llama.cpp and Hugging Face tokenizers do.
//
// Invalid UTF-8 in input text (llama.cpp's policy, reproduced):
//   - BPE (byte-level, and gemma4's over raw UTF-8): the pre-tokenizer decodes text leniently (overlong forms and
//     surrogates are accepted as code points); every byte that does not start a well-formed sequence becomes
//     U+FFFD, which is then tokenized like any other character.  Such input therefore does not round-trip.
//   - SentencePiece: text is cut into characters by the lead byte's length alone; a piece that is not in the
//     vocabulary falls back to its bytes as <0xXX> tokens, so every input byte survives and round-trips.
// Output of token_to_piece/decode may itself be invalid UTF-8 (a byte token, or half of a character split
// across tokens); StreamDecoder holds such bytes back until the character is complete.
//
// Thread safety: a Tokenizer is immutable after from_gguf; encode/decode may run concurrently.  Copies share
// the same immutable state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/tokenizer/vocab.h"
#include "diskformer/util/result.h"

namespace df::tokenizer {

struct EncodeOptions {
  std::optional<bool> add_bos;  // nullopt: as the vocabulary says (tokenizer.ggml.add_bos_token / model default)
  std::optional<bool> add_eos;  // nullopt: as the vocabulary says
  bool parse_special = false;   // recognise control tokens (<|im_start|>, <s>, ...) written in the text
};

struct DecodeOptions {
  bool remove_special = false;    // drop a leading BOS / trailing EOS where the vocabulary adds them
  bool render_special = false;    // print control tokens' text (otherwise they print nothing)
  std::optional<bool> clean_spaces;  // nullopt: the vocabulary's clean_up_tokenization_spaces
};

class Tokenizer {
 public:
  // Builds the vocabulary, the pre-tokenizer regexes (PCRE2) and the lookup tables.  Errors name the file and
  // the key (or the pre-tokenizer name that is not known).
  static Result<Tokenizer> from_gguf(const gguf::File& file);
  static Result<Tokenizer> from_file(const std::string& gguf_path);

  // llama_tokenize(text, add_special, parse_special) with add_bos/add_eos overridable one by one.
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const;

  // llama_token_to_piece: the bytes one token prints.  Control/unknown tokens print "" unless render_special;
  // lstrip removes up to that many leading spaces (SPM's first-token rule).  Out-of-range ids print "".
  std::string token_to_piece(int32_t id, bool render_special = false, int lstrip = 0) const;

  // llama_detokenize: pieces joined, the SPM leading space of the first piece removed (unless the first token
  // is a removed BOS), then clean_up_tokenization_spaces where the vocabulary asks for it.
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& opts = {}) const;

  bool is_eog(int32_t id) const;
  bool is_control(int32_t id) const;
  int32_t bos() const;  // kNoToken where the vocabulary has none
  int32_t eos() const;
  int32_t eot() const;
  int32_t unk() const;
  int32_t pad() const;
  int32_t nl() const;
  bool add_bos() const;
  bool add_eos() const;
  size_t n_vocab() const;
  int32_t find(std::string_view token_text) const;  // exact token text -> id, or kNoToken
  const Vocab& vocab() const;

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

struct StreamOptions {
  bool render_special = false;       // print control tokens' text
  bool strip_leading_space = false;  // SPM: drop one leading space of the first piece (llama.cpp's detokenize rule)
};

// Turns generated ids into bytes as they arrive, never emitting part of a UTF-8 character: bytes of a character
// split across tokens are held until it is complete.  Bytes that cannot start or continue a valid sequence are
// emitted as they are (they will never become valid).  flush() returns whatever is still held.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, StreamOptions opts = {});

  std::string push(int32_t id);  // complete characters now available (possibly "")
  std::string flush();           // the held bytes, even if incomplete; the decoder can be reused afterwards
  size_t pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tok_;  // shares the tokenizer's immutable state, so the decoder may outlive the object it came from
  StreamOptions opts_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace df::tokenizer
