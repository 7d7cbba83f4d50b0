// diskformer convert --raw DIR --tokenizer-from GGUF [--type q8_0|q4_0|f16|f32] -o OUT.gguf
// diskformer convert --corpus TEXT --tokenizer-from GGUF -o OUT.bin
// The first turns a training program's float32 export (../include/diskformer/convert/raw_model.h) into a GGUF;
// the second tokenizes training text (documents separated by blank lines) into uint16 ids.
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/partial_file.h"
#include "diskformer/convert/corpus.h"
#include "diskformer/convert/raw_model.h"
#include "diskformer/gguf/types.h"
#include "diskformer/tokenizer/tokenizer.h"

namespace df::cli {

int cmd_convert(int argc, char** argv) {
  Args args("convert", "(--raw DIR | --corpus TEXT) --tokenizer-from GGUF [--type T] -o OUT");
  args.option("--raw", "DIR", "float32 tensors and manifest.json written by tools/train/train.py");
  args.option("--corpus", "TEXT", "text whose blank-line-separated documents to tokenize into uint16 ids");
  args.option("--tokenizer-from", "GGUF", "GGUF whose tokenizer.* metadata the output uses");
  args.option("--type", "T", "matrix type: q8_0 (default), q4_0, f16 or f32; norms and routers stay f32");
  args.option("-o,--output", "PATH", "output file");
  args.flag("--quiet", "print nothing on success");
  if (!args.parse(argc, argv)) return args.exit_code();
  const auto raw = args.get("--raw"), corpus = args.get("--corpus");
  const auto vocab = args.get("--tokenizer-from"), out = args.get("--output");
  if (raw.has_value() == corpus.has_value()) return args.usage_error("give exactly one of --raw DIR or --corpus TEXT");
  if (!vocab) return args.usage_error("missing --tokenizer-from GGUF");
  if (!out) return args.usage_error("missing -o OUT");
  const RemoveOnSignal cleanup(*out + ".partial");  // both outputs are written as OUT.partial, then renamed

  if (corpus) {
    auto tok = tokenizer::Tokenizer::from_file(*vocab);
    if (!tok.ok()) {
      std::fprintf(stderr, "diskformer convert: %s\n", tok.error().message.c_str());
      return 1;
    }
    auto stats = convert::tokenize_corpus(*tok, *corpus, *out);
    if (!stats.ok()) {
      std::fprintf(stderr, "diskformer convert: %s\n", stats.error().message.c_str());
      return 1;
    }
    if (!args.has("--quiet"))
      std::fprintf(stderr, "diskformer convert: %s: %llu documents, %llu tokens -> %s\n", corpus->c_str(),
                   static_cast<unsigned long long>(stats->documents), static_cast<unsigned long long>(stats->tokens),
                   out->c_str());
    return 0;
  }

  const std::string type_name = args.get_or("--type", "q8_0");
  const auto type = gguf::type_from_name(type_name);
  if (!type) return args.usage_error("unknown --type " + type_name);
  convert::ConvertOptions opts{.raw_dir = *raw, .tokenizer_from = *vocab, .type = *type, .out = *out};
  if (auto st = convert::convert_raw(opts); !st.ok()) {
    std::fprintf(stderr, "diskformer convert: %s\n", st.error().message.c_str());
    return 1;
  }
  if (!args.has("--quiet")) std::fprintf(stderr, "diskformer convert: %s -> %s\n", raw->c_str(), out->c_str());
  return 0;
}

}  // namespace df::cli
