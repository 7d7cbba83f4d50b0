// Vocabulary loading: tokenizer.ggml.* keys with llama.cpp's defaults, pre-tokenizer names and inferred
// token attributes (llama_vocab::impl::load).
#include "diskformer/tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <optional>

namespace df::tokenizer {

namespace {

Error key_error(const gguf::File& f, std::string_view key, const std::string& what) {
  return Error{f.path + ": " + std::string(key) + ": " + what};
}

// Flags a pre-tokenizer name sets on top of the BPE defaults (add_space_prefix off, clean_spaces on).
struct PreName {
  const char* name;
  PreType type;
  bool clean_spaces = true;
  bool ignore_merges = false;
  bool add_bos = false;  // forces add_bos on (a GGUF key may still turn it off)
  bool no_bos = false;   // the vocabulary has no BOS token
  bool escape_whitespaces = false;
  bool add_sep = false;
};

// Every name llama.cpp's loader accepts for a byte-level BPE vocabulary, in its order.
constexpr PreName kPreNames[] = {
    {"default", PreType::Default},
    {"minicpm5", PreType::MiniCpm5, true, true},
    {"llama3", PreType::Llama3, true, true, true},
    {"llama-v3", PreType::Llama3, true, true, true},
    {"llama-bpe", PreType::Llama3, true, true, true},
    {"falcon3", PreType::Llama3, true, true, true},
    {"falcon-h1", PreType::Llama3, true, true, true},
    {"pixtral", PreType::Llama3, true, true, true},
    {"midm-2.0", PreType::Llama3, true, true, true},
    {"lfm2", PreType::Llama3, true, true, true},
    {"jina-v5-nano", PreType::Llama3, true, true, true},
    {"deepseek-llm", PreType::DeepseekLlm, false},
    {"deepseek-coder", PreType::DeepseekCoder, false},
    {"deepseek-v3", PreType::Deepseek3Llm, false},
    {"spark2_5", PreType::Spark25, false},
    {"youtu", PreType::Youtu, false, true},
    {"falcon", PreType::Falcon},
    {"mpt", PreType::Gpt2},
    {"starcoder", PreType::Starcoder},
    {"gpt-2", PreType::Gpt2},
    {"phi-2", PreType::Gpt2},
    {"jina-es", PreType::Gpt2},
    {"jina-de", PreType::Gpt2},
    {"gigachat", PreType::Gpt2},
    {"jina-v2-es", PreType::Gpt2},
    {"jina-v2-de", PreType::Gpt2},
    {"a.x-4.0", PreType::Gpt2},
    {"mellum", PreType::Gpt2},
    {"modern-bert", PreType::Gpt2},
    {"jais-2", PreType::Jais2},
    {"gemma4", PreType::Gemma4, true, false, false, false, true},
    {"granite-embed-multi-311m", PreType::Gemma4, true, false, false, false, true},
    {"sarvam-moe", PreType::SarvamMoe, false, false, false, false, true},
    {"jina-v1-en", PreType::Gpt2, true, false, false, false, false, true},
    {"jina-v2-code", PreType::Gpt2, true, false, false, false, false, true},
    {"roberta-bpe", PreType::Gpt2, true, false, false, false, false, true},
    {"whitespace", PreType::Whitespace},
    {"refact", PreType::Starcoder},
    {"command-r", PreType::Starcoder, false},
    {"qwen2", PreType::Qwen2, false},
    {"deepseek-r1-qwen", PreType::Qwen2, false},
    {"kormo", PreType::Qwen2, false},
    {"f2llmv2", PreType::Qwen2, false},
    {"qwen35", PreType::Qwen35, false},
    {"stablelm2", PreType::Qwen2},
    {"olmo", PreType::Gpt2},
    {"dbrx", PreType::Dbrx},
    {"smaug-bpe", PreType::Dbrx},
    {"poro-chat", PreType::Poro, false},
    {"glm4", PreType::ChatGlm4, true, false, false, true},
    {"chatglm-bpe", PreType::ChatGlm4, true, false, false, true},
    {"viking", PreType::Viking, false},
    {"jais", PreType::Gpt2},
    {"tekken", PreType::Tekken, false, true, true},
    {"smollm", PreType::Starcoder, false},
    {"codeshell", PreType::Starcoder},
    {"bloom", PreType::Poro},
    {"gpt3-finnish", PreType::Poro},
    {"exaone", PreType::Starcoder},
    {"exaone4", PreType::Gpt2},
    {"exaone-moe", PreType::ExaoneMoe},
    {"chameleon", PreType::Chameleon, false, false, true},
    {"minerva-7b", PreType::Starcoder},
    {"megrez", PreType::Qwen2},
    {"gpt-4o", PreType::Gpt4o, false},
    {"llama4", PreType::Gpt4o, false},
    {"kanana2", PreType::Gpt4o, false},
    {"talkie", PreType::Gpt4o, false},
    {"granite-embed-multi-97m", PreType::GraniteEmbMulti, false, true},
    {"tiny_aya", PreType::TinyAya, false},
    {"cohere2moe", PreType::TinyAya, false},
    {"superbpe", PreType::SuperBpe, false},
    {"trillion", PreType::Gpt2, false},
    {"granite-docling", PreType::Gpt2, false},
    {"bailingmoe", PreType::BailingMoe, false},
    {"bailingmoe2", PreType::BailingMoe, false},
    {"llada-moe", PreType::BailingMoe, false},
    {"seed-coder", PreType::SeedCoder, false},
    {"hunyuan", PreType::Qwen2, false},
    {"hunyuan-dense", PreType::Deepseek3Llm, false},
    {"hy_v4", PreType::Deepseek3Llm, false},
    {"joyai-llm", PreType::Deepseek3Llm, false},
    {"kimi-k2", PreType::KimiK2, false},
    {"ufakzeka", PreType::Ufakzeka, false},
    {"grok-2", PreType::Grok2, false},
    {"afmoe", PreType::Afmoe, false},
    {"laguna", PreType::Laguna, false},
    {"minimax-m2", PreType::Gpt4o, false},
    {"solar-open", PreType::Qwen2, false},
    {"mellum2", PreType::Starcoder},
};

// Token text llama.cpp treats as end-of-generation (and forces to control) whatever the file says.
constexpr const char* kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "[e~[",
};

bool in_list(const std::string& s, std::initializer_list<const char*> list) {
  for (const char* t : list)
    if (s == t) return true;
  return false;
}

struct SpecialKey {
  const char* key;
  int32_t Vocab::*field;
};

constexpr SpecialKey kSpecialKeys[] = {
    {"tokenizer.ggml.bos_token_id", &Vocab::bos},
    {"tokenizer.ggml.eos_token_id", &Vocab::eos},
    {"tokenizer.ggml.eot_token_id", &Vocab::eot},
    {"tokenizer.ggml.eom_token_id", &Vocab::eom},
    {"tokenizer.ggml.unknown_token_id", &Vocab::unk},
    {"tokenizer.ggml.seperator_token_id", &Vocab::sep},  // sic: the key GGUF files use
    {"tokenizer.ggml.padding_token_id", &Vocab::pad},
    {"tokenizer.ggml.mask_token_id", &Vocab::mask},
    {"tokenizer.ggml.fim_pre_token_id", &Vocab::fim_pre},
    {"tokenizer.ggml.fim_suf_token_id", &Vocab::fim_suf},
    {"tokenizer.ggml.fim_mid_token_id", &Vocab::fim_mid},
    {"tokenizer.ggml.fim_pad_token_id", &Vocab::fim_pad},
    {"tokenizer.ggml.fim_rep_token_id", &Vocab::fim_rep},
    {"tokenizer.ggml.fim_sep_token_id", &Vocab::fim_sep},
    {"tokenizer.ggml.prefix_token_id", &Vocab::fim_pre},  // deprecated spellings
    {"tokenizer.ggml.suffix_token_id", &Vocab::fim_suf},
    {"tokenizer.ggml.middle_token_id", &Vocab::fim_mid},
};

Result<std::optional<bool>> optional_bool(const gguf::File& f, const char* key) {
  const gguf::Value* v = f.find(key);
  if (!v) return std::optional<bool>{};
  auto b = v->to_bool();
  if (!b) return key_error(f, key, "expected a bool, found " + std::string(gguf::value_type_name(v->type)));
  return std::optional<bool>{*b};
}

Status read_merges(const gguf::File& f, Vocab& v) {
  const char* key = "tokenizer.ggml.merges";
  const gguf::Value* m = f.find(key);
  if (!m) {
    if (v.pre == "kimi-k2") return Status::Ok();  // Kimi-K2 ships without merges
    return key_error(f, key, "missing (a BPE vocabulary needs its merges)");
  }
  const gguf::Array* arr = m->array();
  if (!arr || arr->elem_type != gguf::ValueType::STRING)
    return key_error(f, key, "expected an array of strings, found " + m->summary());
  v.merge_ranks.reserve(arr->items.size());
  std::string k;
  for (size_t i = 0; i < arr->items.size(); ++i) {
    const std::string& line = *arr->items[i].str();
    // llama.cpp splits at the first space after the first byte; a line without one is the pair ("", "").
    std::string first, second;
    size_t pos = line.find(' ', 1);
    if (pos != std::string::npos) {
      first = line.substr(0, pos);
      second = line.substr(pos + 1);
    }
    k = first;
    k += '\xff';
    k += second;
    v.merge_ranks.emplace(k, static_cast<int32_t>(i));  // the first line wins, as with emplace there
  }
  return Status::Ok();
}

Status apply_model_defaults(const gguf::File& f, Vocab& v) {
  if (v.model == "llama") {
    v.type = VocabType::Spm;
    v.bos = 1;
    v.eos = 2;
    v.unk = 0;
    v.pre_type = PreType::Default;
    v.add_space_prefix = true;
    v.clean_spaces = false;
    v.add_bos = true;
    v.add_eos = false;
    v.escape_whitespaces = true;
    return Status::Ok();
  }
  if (v.model == "gpt2") {
    v.type = VocabType::Bpe;
    DF_TRY(read_merges(f, v));
    v.bos = 11;
    v.eos = 11;
    v.unk = kNoToken;
  } else if (v.model == "gemma4") {
    v.type = VocabType::Bpe;
    DF_TRY(read_merges(f, v));
    v.bos = v.eos = v.unk = kNoToken;
    v.pre = "gemma4";
  } else {
    return key_error(f, "tokenizer.ggml.model",
                     "unsupported tokenizer model '" + v.model + "' (supported: llama, gpt2, gemma4)");
  }
  v.add_space_prefix = false;
  v.escape_whitespaces = false;
  v.clean_spaces = true;
  if (v.pre.empty()) {
    v.pre_type = PreType::Default;  // llama.cpp warns that quality will suffer, and goes on
    return Status::Ok();
  }
  for (const PreName& p : kPreNames) {
    if (v.pre != p.name) continue;
    v.pre_type = p.type;
    v.clean_spaces = p.clean_spaces;
    v.ignore_merges = p.ignore_merges;
    if (p.add_bos) v.add_bos = true;
    if (p.no_bos) v.bos = kNoToken;
    if (p.escape_whitespaces) v.escape_whitespaces = true;
    if (p.add_sep) v.add_sep = true;
    v.byte_encode = !(p.type == PreType::Gemma4 || p.type == PreType::SarvamMoe || p.type == PreType::Whitespace);
    return Status::Ok();
  }
  return key_error(f, "tokenizer.ggml.pre", "unknown pre-tokenizer '" + v.pre + "'");
}

Status read_tokens(const gguf::File& f, Vocab& v) {
  const char* key = "tokenizer.ggml.tokens";
  const gguf::Value* tv = f.find(key);
  if (!tv) return key_error(f, key, "missing (the file has no vocabulary)");
  const gguf::Array* tokens = tv->array();
  if (!tokens || tokens->elem_type != gguf::ValueType::STRING)
    return key_error(f, key, "expected an array of strings, found " + tv->summary());
  const size_t n = tokens->items.size();
  if (n == 0) return key_error(f, key, "empty token list");
  if (n > static_cast<size_t>(INT32_MAX)) return key_error(f, key, "too many tokens: " + std::to_string(n));

  const gguf::Array* scores = nullptr;
  if (const gguf::Value* sv = f.find("tokenizer.ggml.scores")) {
    scores = sv->array();
    if (!scores || (scores->elem_type != gguf::ValueType::F32 && scores->elem_type != gguf::ValueType::I32))
      return key_error(f, "tokenizer.ggml.scores", "expected an array of f32 or i32, found " + sv->summary());
    if (scores->items.size() < n)
      return key_error(f, "tokenizer.ggml.scores", "has " + std::to_string(scores->items.size()) +
                                                       " entries for " + std::to_string(n) + " tokens");
  }
  const gguf::Array* types = nullptr;
  if (const gguf::Value* yv = f.find("tokenizer.ggml.token_type")) {
    types = yv->array();
    if (!types || types->elem_type != gguf::ValueType::I32)
      return key_error(f, "tokenizer.ggml.token_type", "expected an array of i32, found " + yv->summary());
    if (types->items.size() < n)
      return key_error(f, "tokenizer.ggml.token_type", "has " + std::to_string(types->items.size()) +
                                                           " entries for " + std::to_string(n) + " tokens");
  }

  v.tokens.resize(n);
  for (size_t i = 0; i < n; ++i) {
    std::string word = *tokens->items[i].str();
    if (word.empty()) word = "[EMPTY_" + std::to_string(i) + "]";
    auto [it, inserted] = v.token_to_id.emplace(word, static_cast<int32_t>(i));
    if (!inserted)
      return key_error(f, key, "duplicate token '" + word + "' at ids " + std::to_string(it->second) + " and " +
                                   std::to_string(i));
    TokenData& t = v.tokens[i];
    t.text = std::move(word);
    t.score = scores ? static_cast<float>(*scores->items[i].to_f64()) : 0.0f;
    t.attr = kAttrNormal;
    if (types) {
      switch (*types->items[i].to_i64()) {
        case 0: t.attr = kAttrUndefined; break;
        case 1: t.attr = kAttrNormal; break;
        case 2: t.attr = kAttrUnknown; break;
        case 3: t.attr = kAttrControl; break;
        case 4: t.attr = kAttrUserDefined; break;
        case 5: t.attr = kAttrUnused; break;
        case 6: t.attr = kAttrByte; break;
        default: t.attr = kAttrUndefined; break;
      }
    }
  }
  return Status::Ok();
}

Status read_special_ids(const gguf::File& f, Vocab& v) {
  for (const SpecialKey& s : kSpecialKeys) {
    int32_t& id = v.*(s.field);
    if (id >= 0 && !v.valid(id)) id = kNoToken;  // a default outside this vocabulary is disabled
    const gguf::Value* val = f.find(s.key);
    if (!val) continue;
    if (!val->is_integer()) return key_error(f, s.key, "expected an integer token id, found " + val->summary());
    auto u = val->to_u64();  // a negative id means "none" and keeps the default
    if (u && *u < v.n_vocab()) id = static_cast<int32_t>(*u);  // out of range keeps the default, as llama.cpp
  }
  DF_ASSIGN(auto add_bos, optional_bool(f, "tokenizer.ggml.add_bos_token"));
  DF_ASSIGN(auto add_eos, optional_bool(f, "tokenizer.ggml.add_eos_token"));
  DF_ASSIGN(auto add_sep, optional_bool(f, "tokenizer.ggml.add_sep_token"));
  if (add_bos) v.add_bos = *add_bos;
  if (add_eos) v.add_eos = *add_eos;
  if (add_sep) v.add_sep = *add_sep;
  if (v.pre_type == PreType::Gemma4) v.add_bos = true;
  if (v.add_bos && v.bos == kNoToken)
    return key_error(f, "tokenizer.ggml.add_bos_token", "is true, but tokenizer.ggml.bos_token_id is not set");
  if (v.add_eos && v.eos == kNoToken)
    return key_error(f, "tokenizer.ggml.add_eos_token", "is true, but tokenizer.ggml.eos_token_id is not set");
  return Status::Ok();
}

// The text-based inferences of llama.cpp's loader.  They iterate token_to_id, an unordered_map filled in id
// order exactly as llama.cpp fills its own, so "the first match wins" picks the same token.
void infer_special_tokens(Vocab& v) {
  auto force_control = [&](int32_t id) { v.tokens[id].attr |= kAttrControl; };
  // Every text compared below starts with one of these bytes: one walk over the map collects those tokens, in
  // the map's order, and the passes below walk only them.
  std::vector<std::pair<const std::string*, int32_t>> candidates;
  for (const auto& [text, id] : v.token_to_id)
    if (!text.empty() && (text[0] == '<' || text[0] == '[' || text[0] == '_' || text[0] == '\xe2'))
      candidates.push_back({&text, id});

  for (const auto& [text_ptr, id] : candidates) {
    const std::string& text = *text_ptr;
    if (v.eot == kNoToken &&
        in_list(text, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                       "<EOT>", "_<EOT>", "[EOT]",
                       "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "<end_of_utterance>"})) {
      v.eot = id;
      force_control(id);
    }
    if (v.eom == kNoToken && text == "<|eom_id|>") {
      v.eom = id;
      force_control(id);
    }
    if (v.fim_pre == kNoToken &&
        in_list(text, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                       "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>", "\xe2\x96\x81<PRE>",
                       "<|code_prefix|>", "<|prefix|>"})) {
      v.fim_pre = id;
      force_control(id);
    }
    if (v.fim_suf == kNoToken &&
        in_list(text, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                       "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>", "\xe2\x96\x81<SUF>",
                       "<|code_suffix|>", "<|suffix|>"})) {
      v.fim_suf = id;
      force_control(id);
    }
    if (v.fim_mid == kNoToken &&
        in_list(text, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                       "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>", "\xe2\x96\x81<MID>",
                       "<|code_middle|>", "<|middle|>"})) {
      v.fim_mid = id;
      force_control(id);
    }
    if (v.fim_pad == kNoToken && in_list(text, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"})) {
      v.fim_pad = id;
      force_control(id);
    }
    if (v.fim_rep == kNoToken &&
        in_list(text, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"})) {
      v.fim_rep = id;
      force_control(id);
    }
    if (v.fim_sep == kNoToken && text == "<|file_sep|>") {
      v.fim_sep = id;
      force_control(id);
    }
  }

  // Control tokens named "unused" are unused.
  for (TokenData& t : v.tokens)
    if ((t.attr & kAttrControl) && !(t.attr & kAttrUnused) && t.text.find("unused") != std::string::npos)
      t.attr |= kAttrUnused;

  v.eog.clear();
  for (int32_t id : {v.fim_pad, v.fim_rep, v.fim_sep})
    if (id != kNoToken) v.eog.insert(id);
  for (const auto& [text, id] : candidates) {
    for (const char* e : kEogTexts) {
      if (*text == e) {
        v.eog.insert(id);
        force_control(id);
        break;
      }
    }
  }
  // gpt-oss: these always render.
  for (const auto& [text, id] : candidates)
    if (in_list(*text, {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) v.tokens[id].attr = kAttrUserDefined;
  for (int32_t id : {v.eos, v.eot, v.eom})
    if (id != kNoToken) v.eog.insert(id);

  // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation, when these tokens exist.
  bool has_return = false, has_call = false, has_end = false, has_flush = false;
  int32_t end_id = kNoToken;
  for (int32_t id : v.eog) {
    if (!v.valid(id)) continue;
    const std::string& t = v.tokens[id].text;
    if (t == "<|return|>") has_return = true;
    else if (t == "<|call|>" || t == "<|calls|>") has_call = true;
    else if (t == "<|flush|>") has_flush = true;
    else if (t == "<|end|>") { has_end = true; end_id = id; }
  }
  if ((has_return && has_call && has_end) || (has_call && has_flush && has_end)) {
    v.eog.erase(end_id);
    v.tokens[end_id].attr = kAttrUserDefined;
  }
  // gemma4 / paddleocr: "</s>" is not end-of-generation beside "<|tool_response>".
  bool has_tool_response = false;
  int32_t s_id = kNoToken;
  for (int32_t id : v.eog) {
    if (!v.valid(id)) continue;
    if (v.tokens[id].text == "<|tool_response>") has_tool_response = true;
    else if (v.tokens[id].text == "</s>") s_id = id;
  }
  if (has_tool_response && s_id != kNoToken) {
    v.eog.erase(s_id);
    v.tokens[s_id].attr = kAttrNormal;
  }
}

// Per-model lstrip/rstrip attributes llama.cpp sets by name (not stored in GGUF files).
void apply_strip_attributes(const gguf::File& f, Vocab& v) {
  std::string name = f.get_string_or("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::string arch = f.get_string_or("general.architecture", "");
  auto contains = [](const std::string& s, std::initializer_list<const char*> subs) {
    for (const char* sub : subs)
      if (s.find(sub) != std::string::npos) return true;
    return false;
  };
  auto set = [&](const char* text, uint32_t attr, bool on) {
    int32_t id = v.find(text);
    if (id == kNoToken) return;
    v.tokens[id].attr = on ? (v.tokens[id].attr | attr) : (v.tokens[id].attr & ~attr);
  };
  if (contains(v.pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) || contains(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", kAttrLstrip, true);
  } else if (contains(name, {"phi-3", "phi3"})) {
    for (int32_t id : v.special_by_length) v.tokens[id].attr |= kAttrRstrip;
    set("</s>", kAttrRstrip, true);
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, kAttrRstrip, false);
  } else if (contains(name, {"modern-bert"})) {
    set("[MASK]", kAttrLstrip, true);
  }
}

}  // namespace

int32_t Vocab::find(std::string_view text) const {
  auto it = token_to_id.find(std::string(text));
  return it == token_to_id.end() ? kNoToken : it->second;
}

int32_t Vocab::merge_rank(std::string_view left, std::string_view right) const {
  std::string k;
  k.reserve(left.size() + right.size() + 1);
  k.append(left);
  k += '\xff';
  k.append(right);
  auto it = merge_ranks.find(k);
  return it == merge_ranks.end() ? -1 : it->second;
}

Result<Vocab> Vocab::from_gguf(const gguf::File& f) {
  Vocab v;
  v.source = f.path;
  const gguf::Value* model = f.find("tokenizer.ggml.model");
  if (!model) return key_error(f, "tokenizer.ggml.model", "missing (the file has no tokenizer)");
  if (!model->str()) return key_error(f, "tokenizer.ggml.model", "expected a string, found " + model->summary());
  v.model = *model->str();
  if (const gguf::Value* pre = f.find("tokenizer.ggml.pre")) {
    if (!pre->str()) return key_error(f, "tokenizer.ggml.pre", "expected a string, found " + pre->summary());
    v.pre = *pre->str();
  }
  DF_TRY(apply_model_defaults(f, v));
  DF_ASSIGN(auto prefix, optional_bool(f, "tokenizer.ggml.add_space_prefix"));
  if (prefix) v.add_space_prefix = *prefix;

  DF_TRY(read_tokens(f, v));
  DF_TRY(read_special_ids(f, v));
  infer_special_tokens(v);

  for (int32_t id = 0; id < static_cast<int32_t>(v.n_vocab()); ++id)
    if (v.tokens[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.special_by_length.push_back(id);
  std::sort(v.special_by_length.begin(), v.special_by_length.end(), [&](int32_t a, int32_t b) {
    return v.tokens[a].text.size() > v.tokens[b].text.size();
  });
  apply_strip_attributes(f, v);
  return v;
}

std::string_view pre_type_name(PreType t) {
  switch (t) {
    case PreType::Default: return "default";
    case PreType::Llama3: return "llama3";
    case PreType::Jais2: return "jais-2";
    case PreType::Dbrx: return "dbrx";
    case PreType::DeepseekLlm: return "deepseek-llm";
    case PreType::Deepseek3Llm: return "deepseek-v3";
    case PreType::Spark25: return "spark2_5";
    case PreType::Youtu: return "youtu";
    case PreType::DeepseekCoder: return "deepseek-coder";
    case PreType::Falcon: return "falcon";
    case PreType::Starcoder: return "starcoder";
    case PreType::Gpt2: return "gpt-2";
    case PreType::Qwen2: return "qwen2";
    case PreType::Qwen35: return "qwen35";
    case PreType::Poro: return "poro-chat";
    case PreType::ChatGlm4: return "chatglm-bpe";
    case PreType::Viking: return "viking";
    case PreType::Tekken: return "tekken";
    case PreType::Chameleon: return "chameleon";
    case PreType::Gpt4o: return "gpt-4o";
    case PreType::GraniteEmbMulti: return "granite-embed-multi-97m";
    case PreType::TinyAya: return "tiny_aya";
    case PreType::KimiK2: return "kimi-k2";
    case PreType::SuperBpe: return "superbpe";
    case PreType::BailingMoe: return "bailingmoe";
    case PreType::SeedCoder: return "seed-coder";
    case PreType::Ufakzeka: return "ufakzeka";
    case PreType::Grok2: return "grok-2";
    case PreType::Afmoe: return "afmoe";
    case PreType::Laguna: return "laguna";
    case PreType::ExaoneMoe: return "exaone-moe";
    case PreType::Gemma4: return "gemma4";
    case PreType::SarvamMoe: return "sarvam-moe";
    case PreType::MiniCpm5: return "minicpm5";
    case PreType::Whitespace: return "whitespace";
  }
  return "?";
}

}  // namespace df::tokenizer
