#include "diskformer/convert/corpus.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace df::convert {

std::vector<std::string_view> split_documents(std::string_view text) {
  std::vector<std::string_view> docs;
  size_t pos = 0, start = std::string_view::npos, end = 0;  // [start, end): the document being collected
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    const size_t line_end = nl == std::string_view::npos ? text.size() : nl;
    if (line_end == pos) {  // blank line: ends the current document
      if (start != std::string_view::npos) docs.push_back(text.substr(start, end - start));
      start = std::string_view::npos;
    } else {
      if (start == std::string_view::npos) start = pos;
      end = line_end;
    }
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
  }
  if (start != std::string_view::npos) docs.push_back(text.substr(start, end - start));
  return docs;
}

Result<CorpusStats> tokenize_corpus(const tokenizer::Tokenizer& tok, const std::string& text_path,
                                    const std::string& out_path) {
  if (tok.n_vocab() > 65536)
    return Error{"tokenize corpus: a vocabulary of " + std::to_string(tok.n_vocab()) + " does not fit uint16 ids"};
  // A directory opens as a stream that reads nothing: refused by name rather than tokenized as empty text.
  std::error_code ec;
  if (std::filesystem::is_directory(text_path, ec)) return Error{text_path + ": is a directory, not a text file"};
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return Error{text_path + ": cannot open: " + std::strerror(errno)};
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Error{text_path + ": read error"};
  const std::string text = ss.str();

  std::vector<uint16_t> ids;
  CorpusStats stats;
  for (std::string_view doc : split_documents(text)) {
    for (int32_t id : tok.encode(doc)) ids.push_back(static_cast<uint16_t>(id));
    ++stats.documents;
  }
  stats.tokens = ids.size();
  const std::string partial = out_path + ".partial";
  std::FILE* f = std::fopen(partial.c_str(), "wb");
  if (!f) return Error{"cannot create " + partial};
  const bool ok = std::fwrite(ids.data(), 2, ids.size(), f) == ids.size();
  if (std::fclose(f) != 0 || !ok) {
    std::remove(partial.c_str());
    return Error{"cannot write " + partial + " (" + std::to_string(ids.size() * 2) + " bytes)"};
  }
  if (std::rename(partial.c_str(), out_path.c_str()) != 0) return Error{"cannot rename " + partial + " to " + out_path};
  return stats;
}

}  // namespace df::convert
