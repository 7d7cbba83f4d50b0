// The regex lists are llama.cpp's (llm_tokenizer_bpe's constructor), pattern for pattern, so that splits match
// its own.  llama.cpp runs most of them through std::regex on a "collapsed" text in which every non-ASCII
// code point stands for its general category; the common ones (gpt-2, llama3, qwen2, qwen35, ...) through
// hand-written matchers.  PCRE2 with UCP on the real text gives the same splits, given the adjustments made when
// compiling (see adapt()).
// Known remaining differences, both outside the shared test suites:
//  - the Unicode version of the category tables: llama.cpp's are Unicode 15.1, PCRE2 10.42's are 14.0, so the
//    characters added in 15.0 and 15.1 (CJK extensions H and I, Kawi, Nag Mundari, Lao U+0ECE, Kannada U+0CF3,
//    new emoji, ...) are letters, marks or symbols there and unassigned here;
//  - kimi-k2's Han test (PCRE2's \p{Han} script where llama.cpp lists CJK blocks).
#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "diskformer/util/check.h"
#include "tokenizer/utf8.h"

namespace df::tokenizer {

namespace {

// Contractions spelled with explicit case classes: PCRE2's caseless matching would also accept U+017F for 's'.
#define DF_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

constexpr const char* kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr const char* kLlama3 = DF_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2 = DF_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kStarcoderDigits = "\\p{N}";
constexpr const char* kPoro = " ?[^(\\s|.,!?…。，、।۔،)]+";
constexpr const char* kDeepseek3Main =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+"
    "[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kCjkKana = "[一-龥぀-ゟ゠-ヿ]+";
constexpr const char* kLinesOnly = "[^\\n]+|[\\n]+";

std::vector<std::string> regexes_for(PreType t) {
  switch (t) {
    case PreType::Llama3:
    case PreType::Dbrx:
    case PreType::ChatGlm4:
      return {kLlama3};
    case PreType::Jais2:
      return {DF_CONTRACTIONS
              "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
              "|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)"
              "|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"};
    case PreType::DeepseekLlm:
      // \x{..}: characters that Unicode normalization would rewrite in source text (U+1F7D, U+2126, ...).
      return {
          "[\r\n]",
          "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
          "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
          "\\s+$",
          "[一-龥ࠀ-一가-퟿]+",
          "\\p{N}+",
      };
    case PreType::Deepseek3Llm:
      return {"\\p{N}{1,3}", kCjkKana, kDeepseek3Main};
    case PreType::Spark25:
      return {"\\p{N}{1,3}", kCjkKana,
              "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
              "| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
              "\\p{N}"};
    case PreType::Youtu:
      return {"[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
              "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" DF_CONTRACTIONS
              "?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" DF_CONTRACTIONS
              "?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreType::DeepseekCoder:
      return {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"};
    case PreType::Falcon:
      return {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"};
    case PreType::Starcoder:
      return {kStarcoderDigits, kGpt2};
    case PreType::Gpt2:
      return {kGpt2};
    case PreType::Qwen2:
    case PreType::Grok2:
      return {kQwen2};
    case PreType::Qwen35:
      return {DF_CONTRACTIONS
              "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
              "|\\s+(?!\\S)|\\s+"};
    case PreType::Poro:
      return {kPoro};
    case PreType::Viking:
      return {kPoro, "\\p{N}"};
    case PreType::Tekken:
      return {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])"
              "([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreType::Chameleon:
      return {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
              "[\\p{P}!-/:-@\\[-`{-~]", kGpt2};
    case PreType::Gpt4o:
      return {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" DF_CONTRACTIONS
              "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" DF_CONTRACTIONS
              "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreType::GraniteEmbMulti:
      return {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+" DF_CONTRACTIONS
              "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*" DF_CONTRACTIONS
              "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreType::TinyAya:
      return {"\\d{1,3}(?=(?:\\d{3})*\\b)",
              "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" DF_CONTRACTIONS
              "?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" DF_CONTRACTIONS
              "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreType::KimiK2:
      // llama.cpp matches Kimi-K2's pattern by hand; its letter runs exclude Han and ignore letter case.
      return {"\\p{Han}+|[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{Han})\\p{L})+" DF_CONTRACTIONS
              "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreType::SuperBpe:
      return {"\\p{N}+", "(?=(\\d{3})+(?!\\d))"};
    case PreType::BailingMoe:
      return {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
              "[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"};
    case PreType::SeedCoder:
      return {DF_CONTRACTIONS
              "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreType::Ufakzeka:
      return {"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreType::Afmoe:  // U+F900 escaped for the same reason
      // llama.cpp's hand-written digit splitter: leading 1-2 digits by length modulo 3, then groups of 3, with
      // the text before a digit run glued to its first group.
      return {"\\P{N}*(?:\\p{N}{1,2}(?=(?:\\p{N}{3})*(?!\\p{N}))|\\p{N}{3})",
              "[一-鿿㐀-䶿\\x{F900}-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
              "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
              "| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreType::Laguna:
      return {kLinesOnly, kQwen2};
    case PreType::ExaoneMoe:
      return {DF_CONTRACTIONS
              "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?"
              "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"};
    case PreType::Gemma4:
    case PreType::SarvamMoe:
      return {kLinesOnly};
    case PreType::MiniCpm5:
      return {"\\p{N}{1,3}",
              DF_CONTRACTIONS
              "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreType::Whitespace:
      return {"\\S+"};
    case PreType::Default:
      return {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"};
  }
  return {};
}

#undef DF_CONTRACTIONS

// What llama.cpp's std::regex evaluation means, spelled for PCRE2:
//  - letter subcategories collapse to \p{L} (its collapsed text has one code for every letter);
//  - \p{S} leaves out '~' (its ASCII stand-in for symbols lists $+<=>^`| only);
//  - \d is ASCII only (std::regex's "C" locale classes);
//  - gpt-2's pattern gets llama.cpp's implicit final "\s+" (its hand-written matcher takes lone whitespace).
// PCRE2_DOLLAR_ENDONLY keeps '$' from matching before a final newline, as in ECMAScript.
std::string adapt(std::string p) {
  for (const char* sub : {"\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}"})
    utf8::replace_all(p, sub, "\\p{L}");
  utf8::replace_all(p, "[^\r\n\\p{L}\\p{P}\\p{S}]", "(?:~|[^\r\n\\p{L}\\p{P}\\p{S}])");
  utf8::replace_all(p, "[^\\r\\n\\p{L}\\p{P}\\p{S}]", "(?:~|[^\\r\\n\\p{L}\\p{P}\\p{S}])");
  utf8::replace_all(p, "[\\p{P}\\p{S}]", "(?:(?!~)[\\p{P}\\p{S}])");
  utf8::replace_all(p, "\\d", "[0-9]");
  if (p == kGpt2) p += "|\\s+";
  return p;
}

struct Regex {
  std::string pattern;  // as llama.cpp writes it
  pcre2_code* code = nullptr;
  bool jit = false;
};

}  // namespace

struct PreTokenizer::Impl {
  std::vector<Regex> regexes;
  std::vector<std::string> patterns;

  ~Impl() {
    for (auto& r : regexes) pcre2_code_free(r.code);
  }
};

Result<PreTokenizer> PreTokenizer::create(PreType type) {
  auto impl = std::make_shared<Impl>();
  for (const std::string& pattern : regexes_for(type)) {
    const std::string compiled = adapt(pattern);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return Error{"pre-tokenizer " + std::string(pre_type_name(type)) + ": regex '" + pattern +
                   "' does not compile at offset " + std::to_string(err_off) + ": " +
                   reinterpret_cast<const char*>(msg)};
    }
    Regex r{pattern, code, pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0};
    impl->regexes.push_back(std::move(r));
    impl->patterns.push_back(pattern);
  }
  return PreTokenizer(std::move(impl));
}

const std::vector<std::string>& PreTokenizer::patterns() const { return impl_->patterns; }

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  const std::vector<uint32_t> cps = utf8::decode_lenient(text);
  const size_t n = cps.size();
  // PCRE2 needs valid UTF-8: lone surrogates and out-of-range values (kept by the lenient decode) are matched
  // as U+200B, a format character, which is what llama.cpp's tables make of them (neither letter, digit,
  // punctuation, symbol nor space).  U+180E is whitespace to PCRE2 but a format character to llama.cpp: the
  // same stand-in.
  constexpr uint32_t kOtherStandIn = 0x200B;
  std::string subject;
  subject.reserve(text.size() + 8);
  std::vector<uint32_t> byte_of(n + 1);       // code point index -> byte offset in subject
  for (size_t i = 0; i < n; ++i) {
    byte_of[i] = static_cast<uint32_t>(subject.size());
    uint32_t c = cps[i];
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF || c == 0x180E) c = kOtherStandIn;
    utf8::append(subject, c);
  }
  byte_of[n] = static_cast<uint32_t>(subject.size());
  std::vector<uint32_t> cp_at(subject.size() + 1, 0);  // byte offset -> code point index (at boundaries)
  for (size_t i = 0; i <= n; ++i) cp_at[byte_of[i]] = static_cast<uint32_t>(i);

  using Seg = std::pair<uint32_t, uint32_t>;  // [begin, end) in code points
  std::vector<Seg> segs;
  if (n > 0) segs.push_back({0, static_cast<uint32_t>(n)});
  std::vector<Seg> next;
  const auto* base = reinterpret_cast<PCRE2_SPTR>(subject.data());

  for (const Regex& re : impl_->regexes) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re.code, nullptr);
    DF_CHECK(md != nullptr);
    next.clear();
    for (const Seg& seg : segs) {
      const uint32_t b0 = byte_of[seg.first];
      const PCRE2_SPTR sub = base + b0;
      const PCRE2_SIZE len = byte_of[seg.second] - b0;
      PCRE2_SIZE start = 0, prev = 0;
      uint32_t opts = 0;
      auto push = [&](PCRE2_SIZE a, PCRE2_SIZE b) {
        if (b > a) next.push_back({cp_at[b0 + a], cp_at[b0 + b]});
      };
      while (start <= len) {
        int rc = pcre2_match(re.code, sub, len, start, opts | PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // very long words: the interpreter has no such limit
          rc = pcre2_match(re.code, sub, len, start, opts | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH && opts != 0) {
          // After an empty match: no non-empty match here, so step over one character and search again.
          if (start >= len) break;
          start += utf8::seq_len(sub[start]);
          opts = 0;
          continue;
        }
        if (rc < 0) break;  // no further match (or a resource limit: the rest stays one piece)
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        push(prev, ov[0]);
        push(ov[0], ov[1]);
        prev = ov[1];
        start = ov[1];
        opts = ov[0] == ov[1] ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
      }
      push(prev, len);
    }
    pcre2_match_data_free(md);
    segs.swap(next);
  }

  std::vector<std::string> words;
  words.reserve(segs.size());
  for (const Seg& seg : segs) {
    std::string w;
    for (uint32_t i = seg.first; i < seg.second; ++i) utf8::append(w, cps[i]);
    words.push_back(std::move(w));
  }
  return words;
}

}  // namespace df::tokenizer
