// A tokenizer vocabulary read from GGUF metadata (`tokenizer.ggml.*`), interpreted the way llama.cpp's
// llama_vocab::load does: the same defaults per model type, the same pre-tokenizer names, the same token
// attributes (including the ones it infers from token text, such as end-of-generation tokens).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/util/result.h"

namespace df::tokenizer {

constexpr int32_t kNoToken = -1;  // LLAMA_TOKEN_NULL

enum class VocabType {
  Spm,  // tokenizer.ggml.model = "llama": SentencePiece scores, byte fallback via <0xXX>
  Bpe,  // "gpt2" (byte-level BPE) and "gemma4" (BPE over raw UTF-8, spaces as U+2581, <0xXX> byte fallback)
};

// Bit flags with llama.cpp's llama_token_attr values.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrNormalized = 1u << 6,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
  kAttrSingleWord = 1u << 9,
};

struct TokenData {
  std::string text;  // as stored in the vocabulary (byte-level BPE: GPT-2's byte-to-unicode alphabet; SPM: U+2581 for spaces)
  float score = 0.0f;
  uint32_t attr = kAttrNormal;
};

// Which regex list splits text before BPE merges (llama.cpp's llama_vocab_pre_type).  Several GGUF names map
// to one kind; `Vocab::pre` keeps the name.
enum class PreType {
  Default, Llama3, Jais2, Dbrx, DeepseekLlm, Deepseek3Llm, Spark25, Youtu, DeepseekCoder, Falcon, Starcoder,
  Gpt2, Qwen2, Qwen35, Poro, ChatGlm4, Viking, Tekken, Chameleon, Gpt4o, GraniteEmbMulti, TinyAya, KimiK2,
  SuperBpe, BailingMoe, SeedCoder, Ufakzeka, Grok2, Afmoe, Laguna, ExaoneMoe, Gemma4, SarvamMoe, MiniCpm5,
  Whitespace,
};

struct Vocab {
  std::string source;  // file the vocabulary came from, for messages
  std::string model;   // tokenizer.ggml.model
  std::string pre;     // tokenizer.ggml.pre ("" where absent)
  VocabType type = VocabType::Spm;
  PreType pre_type = PreType::Default;

  std::vector<TokenData> tokens;                    // [n_vocab]
  std::unordered_map<std::string, int32_t> token_to_id;
  // BPE merges: key is left + '\xff' + right (0xFF never occurs in UTF-8), value the rank (merge line number).
  std::unordered_map<std::string, int32_t> merge_ranks;

  int32_t bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken;
  int32_t sep = kNoToken, pad = kNoToken, mask = kNoToken, linefeed = kNoToken;
  int32_t fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken, fim_pad = kNoToken, fim_rep = kNoToken,
          fim_sep = kNoToken;
  std::set<int32_t> eog;  // tokens that end generation

  bool add_bos = false, add_eos = false, add_sep = false;
  bool add_space_prefix = false;     // SPM: prepend a space to text at the start and after special tokens
  bool ignore_merges = false;        // BPE: a pre-token that is a whole token skips the merges
  bool clean_spaces = false;         // detokenize: clean_up_tokenization_spaces
  bool escape_whitespaces = false;   // BPE: spaces become U+2581 before merges (gemma4)
  bool byte_encode = true;           // BPE: GPT-2 byte-to-unicode alphabet (false: raw UTF-8 + <0xXX> tokens)

  // Control, user-defined and unknown tokens, longest text first: the ones matched inside text.
  std::vector<int32_t> special_by_length;

  size_t n_vocab() const { return tokens.size(); }
  bool valid(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < tokens.size(); }
  int32_t find(std::string_view text) const;  // kNoToken where absent
  // The merge rank of (left, right), or -1.
  int32_t merge_rank(std::string_view left, std::string_view right) const;

  // Loads every tokenizer.ggml.* key.  Errors name the file and the key: a missing token list, merges missing
  // from a BPE vocabulary, a wrong value type, an array shorter than the token list, an unknown model or
  // pre-tokenizer name, a duplicate token.
  static Result<Vocab> from_gguf(const gguf::File& file);
};

// llama.cpp's name for a pre-tokenizer kind, for messages.
std::string_view pre_type_name(PreType t);

}  // namespace df::tokenizer
