// Training text to token ids: documents separated by blank lines, each tokenized on its own exactly as a prompt is
// (the vocabulary's BOS, SentencePiece's leading space), concatenated as little-endian uint16 ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "diskformer/tokenizer/tokenizer.h"
#include "diskformer/util/result.h"

namespace df::convert {

struct CorpusStats {
  uint64_t documents = 0;
  uint64_t tokens = 0;
};

// Documents of text: runs of lines between blank lines, the newlines inside a document kept, the separating ones not.
std::vector<std::string_view> split_documents(std::string_view text);

// Tokenizes text_path's documents and writes their ids to out_path. Refuses a vocabulary over 65,536 tokens.
Result<CorpusStats> tokenize_corpus(const tokenizer::Tokenizer& tok, const std::string& text_path,
                                    const std::string& out_path);

}  // namespace df::convert
