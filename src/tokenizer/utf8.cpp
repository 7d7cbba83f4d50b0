#include "tokenizer/utf8.h"

#include <array>

namespace df::tokenizer::utf8 {

namespace {

bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

struct ByteAlphabet {
  std::array<std::string, 256> to_text;
  std::array<int16_t, 324> to_byte;  // code points 0..323 cover the whole alphabet (max is U+0143)

  ByteAlphabet() {
    to_byte.fill(-1);
    std::array<bool, 256> printable{};
    for (int b = 0x21; b <= 0x7E; ++b) printable[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      uint32_t cp = printable[b] ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      append(to_text[b], cp);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

std::vector<uint32_t> decode_lenient(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = p[i];
    if (!(b0 & 0x80)) {
      out.push_back(b0);
      i += 1;
    } else if (!(b0 & 0x40)) {
      out.push_back(kReplacement);
      i += 1;
    } else if (!(b0 & 0x20)) {
      if (i + 1 >= n || !is_cont(p[i + 1])) {
        out.push_back(kReplacement);
        i += 1;
      } else {
        out.push_back(((b0 & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu));
        i += 2;
      }
    } else if (!(b0 & 0x10)) {
      if (i + 2 >= n || !is_cont(p[i + 1]) || !is_cont(p[i + 2])) {
        out.push_back(kReplacement);
        i += 1;
      } else {
        out.push_back(((b0 & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu));
        i += 3;
      }
    } else if (!(b0 & 0x08)) {
      if (i + 3 >= n || !is_cont(p[i + 1]) || !is_cont(p[i + 2]) || !is_cont(p[i + 3])) {
        out.push_back(kReplacement);
        i += 1;
      } else {
        out.push_back(((b0 & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) | ((p[i + 2] & 0x3Fu) << 6) |
                      (p[i + 3] & 0x3Fu));
        i += 4;
      }
    } else {
      out.push_back(kReplacement);
      i += 1;
    }
  }
  return out;
}

void append(std::string& out, uint32_t cp) {
  if (cp <= 0x7F) {
    out += static_cast<char>(cp);
  } else if (cp <= 0x7FF) {
    out += static_cast<char>(0xC0 | ((cp >> 6) & 0x1F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp <= 0xFFFF) {
    out += static_cast<char>(0xE0 | ((cp >> 12) & 0x0F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp <= 0x10FFFF) {
    out += static_cast<char>(0xF0 | ((cp >> 18) & 0x07));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    append(out, kReplacement);
  }
}

size_t complete_prefix(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  // Only the last three bytes can belong to an unfinished sequence; find its lead byte.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t b = p[n - back];
    if (is_cont(b)) continue;
    if (b < 0xC0 || b >= 0xF8) return n;  // ASCII or an invalid lead: nothing to wait for
    const size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    return need > back ? n - back : n;
  }
  return n;  // only continuation bytes at the end: stray bytes, never completed
}

const std::string& byte_to_unicode(uint8_t b) { return alphabet().to_text[b]; }

int unicode_to_byte(uint32_t cp) { return cp < alphabet().to_byte.size() ? alphabet().to_byte[cp] : -1; }

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit = s.find(from); hit != std::string::npos; hit = s.find(from, pos)) {
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

}  // namespace df::tokenizer::utf8
