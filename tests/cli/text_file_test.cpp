// A directory given where a text file is expected is refused with its path (exit 1), never read as empty text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/cli_run.h"

namespace df::test {
namespace {

namespace fs = std::filesystem;

void expect_directory_refused(const std::string& args, const fs::path& dir) {
  const CliRun r = run_cli_capture(args);
  EXPECT_EQ(r.status, 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(dir.string() + ": is a directory, not a text file"), std::string::npos) << args << "\n" << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(Cli, DirectoryForATextFileIsRefused) {
  const fs::path dir = temp_dir("text_file");
  const fs::path text_dir = dir / "not-a-file";
  fs::create_directories(text_dir);
  std::ofstream(dir / "m.json") << R"([{"role": "user", "content": "hello"}])";
  std::ofstream(dir / "t.jinja") << "{{ messages[0].content }}";
  const std::string d = text_dir.string();
  // Each is refused before the (missing) model would be opened.
  expect_directory_refused("tokenize -m /nonexistent.gguf -f " + d, text_dir);
  expect_directory_refused("routing -m /nonexistent.gguf -f " + d, text_dir);
  expect_directory_refused("run -m /nonexistent.gguf -f " + d, text_dir);
  expect_directory_refused("render-template --template " + d + " --messages " + (dir / "m.json").string(), text_dir);
  expect_directory_refused("render-template --template " + (dir / "t.jinja").string() + " --messages " + d, text_dir);
}

TEST(Cli, DirectoryForAConvertCorpusIsRefused) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  const fs::path dir = temp_dir("text_file_corpus");
  fs::create_directories(dir / "corpus");
  expect_directory_refused("convert --corpus " + (dir / "corpus").string() + " --tokenizer-from " + vocab.string() +
                               " -o " + (dir / "out.bin").string(),
                           dir / "corpus");
  EXPECT_FALSE(fs::exists(dir / "out.bin"));
}

}  // namespace
}  // namespace df::test
