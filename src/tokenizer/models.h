// The two merge algorithms, applied to one fragment of text that holds no special token.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "diskformer/tokenizer/vocab.h"
#include "tokenizer/pretokenizer.h"

namespace df::tokenizer {

// Byte-level BPE (llama.cpp's llm_tokenizer_bpe_session): pre-tokenize, map bytes to GPT-2's alphabet (where
// the vocabulary does), then per word merge the adjacent pair of lowest rank, leftmost first.  A final piece
// that is not a token falls back to single-byte tokens; bytes without one are dropped, as in llama.cpp.
void bpe_tokenize(const Vocab& vocab, const PreTokenizer& pre, std::string_view text, std::vector<int32_t>& out);

// SentencePiece BPE (llm_tokenizer_spm_session) over text whose spaces are already U+2581: start from UTF-8
// characters, merge the adjacent pair whose union is the token of highest score (leftmost on ties); a piece
// that is no token becomes <0xXX> byte tokens.
void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);

// The token of one byte: <0xXX>, else the byte itself as text; kNoToken where neither exists.
int32_t spm_byte_token(const Vocab& vocab, uint8_t byte);

}  // namespace df::tokenizer
