// UTF-8 helpers with llama.cpp's exact leniency, and GPT-2's byte-to-unicode alphabet.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace df::tokenizer::utf8 {

constexpr uint32_t kReplacement = 0xFFFD;

// Length of a sequence from its lead byte alone (1 for continuation bytes), as llama.cpp's unicode_len_utf8.
inline size_t seq_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Code points of `s`.  Overlong forms and surrogates decode as they come; a byte that does not start a
// complete sequence becomes U+FFFD and decoding resumes at the next byte.
std::vector<uint32_t> decode_lenient(std::string_view s);

// Appends the UTF-8 form of `cp`; values above U+10FFFF (only a lenient 4-byte decode makes them) become U+FFFD.
void append(std::string& out, uint32_t cp);

// Length of the longest prefix of `s` that does not end inside an incomplete (but so far valid) sequence.
size_t complete_prefix(std::string_view s);

// Replaces every occurrence of `from` (not empty) in `s` by `to`, left to right.
void replace_all(std::string& s, std::string_view from, std::string_view to);

// GPT-2 byte-level alphabet: every byte has a printable code point (printable Latin-1 bytes map to themselves,
// the others to U+0100 + n in byte order).
const std::string& byte_to_unicode(uint8_t b);   // the UTF-8 text of that code point
int unicode_to_byte(uint32_t cp);                 // the byte, or -1 for a code point outside the alphabet

}  // namespace df::tokenizer::utf8
