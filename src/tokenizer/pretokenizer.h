// Pre-tokenization for BPE vocabularies: the regex list llama.cpp uses for the vocabulary's pre-tokenizer,
// applied in turn (each regex splits every piece left by the previous ones into its matches and the text
// between them), with Unicode categories from PCRE2 (UTF + UCP).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "diskformer/tokenizer/vocab.h"
#include "diskformer/util/result.h"

namespace df::tokenizer {

class PreTokenizer {
 public:
  // Compiles the regexes of `type`.  An error names the pattern and PCRE2's message.
  static Result<PreTokenizer> create(PreType type);

  // The words of `text` as UTF-8, before any byte encoding.  Invalid UTF-8 has become U+FFFD (llama.cpp).
  std::vector<std::string> split(std::string_view text) const;

  // The regexes, for tests and messages.
  const std::vector<std::string>& patterns() const;

 private:
  struct Impl;
  explicit PreTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace df::tokenizer
