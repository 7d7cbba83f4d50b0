// diskformer tokenize: stdout is one JSON line equal to the library's result; failures exit 1 or 2 with one line.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "diskformer/gguf/writer.h"
#include "diskformer/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace df::tokenizer {
namespace {

struct CliRun {
  int code = -1;
  std::string out, err;
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

CliRun run_cli(const std::vector<std::string>& args) {
  const auto dir = test::temp_dir("cli");
  const auto err_path = dir / "stderr";
  std::string cmd = shell_quote(test::cli_path().string()) + " tokenize";
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>" + shell_quote(err_path.string());
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  std::getline(e, r.err);
  return r;
}

constexpr const char* kQwen = "models/qwen3moe-q4_0.gguf";
constexpr const char* kLlama = "models/llama-f16.gguf";

TEST(TokenizeCli, IdsMatchTheLibrary) {
  DF_REQUIRE_SHARED(qwen, kQwen);
  auto tok = Tokenizer::from_file(qwen.string());
  ASSERT_TRUE(tok.ok());
  const std::string text = "<|im_start|>user\nHello, 世界 🦙<|im_end|>";
  // Control tokens in the text are recognised by default, as run tokenizes its prompt.
  CliRun r = run_cli({"-m", qwen.string(), "-p", text});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1);  // exactly one line
  const auto special = tok->encode(text, {.parse_special = true});
  EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int32_t>>(), special);
  EXPECT_EQ(special.front(), tok->find("<|im_start|>"));

  r = run_cli({"-m", qwen.string(), "--parse-special", "-p", text});  // still accepted, the default
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int32_t>>(), special);

  r = run_cli({"-m", qwen.string(), "--no-parse-special", "-p", text});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int32_t>>(), tok->encode(text));
  EXPECT_NE(tok->encode(text), special);

  r = run_cli({"-m", qwen.string(), "--parse-special", "--no-parse-special", "-p", text});
  EXPECT_EQ(r.code, 2);
}

TEST(TokenizeCli, PiecesNoBosAndFileInput) {
  DF_REQUIRE_SHARED(llama, kLlama);
  auto tok = Tokenizer::from_file(llama.string());
  ASSERT_TRUE(tok.ok());
  CliRun r = run_cli({"-m", llama.string(), "--pieces", "-p", "Hello world"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["id"], tok->bos());
  EXPECT_EQ(j[0]["piece"], "<s>");
  EXPECT_EQ(j[1]["piece"], " Hello");
  EXPECT_EQ(j[2]["piece"], " world");

  const auto file = test::temp_dir("input") / "prompt.txt";
  std::ofstream(file, std::ios::binary) << "line one\nline two\n";
  r = run_cli({"-m", llama.string(), "--no-bos", "-f", file.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int32_t>>(),
            tok->encode("line one\nline two\n", {.add_bos = false}));
}

// The two vocabularies of the newer families: gemma4's BPE (BOS always, spaces as U+2581) and qwen35's splitter.
TEST(TokenizeCli, Gemma4AndQwen35Vocabularies) {
  DF_REQUIRE_SHARED(gemma4, "vocab/ggml-vocab-gemma4.gguf");
  DF_REQUIRE_SHARED(qwen35, "vocab/ggml-vocab-qwen35.gguf");
  const std::string text = "Hello world\n\n  caf\xc3\xa9 na\xc3\xafve \xf0\x9f\xa6\x99";
  for (const auto& path : {gemma4, qwen35}) {
    auto tok = Tokenizer::from_file(path.string());
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    CliRun r = run_cli({"-m", path.string(), "-p", text});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int32_t>>(), tok->encode(text)) << path;
  }
  CliRun r = run_cli({"-m", gemma4.string(), "--pieces", "-p", "Hello world"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["piece"], "<bos>");
  EXPECT_EQ(j[1]["piece"], "Hello");
  EXPECT_EQ(j[2]["piece"], " world");
}

TEST(TokenizeCli, FailuresExitWithOneLine) {
  DF_REQUIRE_SHARED(llama, kLlama);
  CliRun r = run_cli({"-m", llama.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("-p TEXT or -f FILE"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());

  r = run_cli({"-m", "/nonexistent/model.gguf", "-p", "x"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());

  // A vocabulary whose pre-tokenizer llama.cpp does not know.
  DF_REQUIRE_SHARED(gpt2, "vocab/ggml-vocab-gpt-2.gguf");
  auto src = gguf::read_file(gpt2.string());
  ASSERT_TRUE(src.ok());
  const auto bad = test::temp_dir("bad") / "bad-pre.gguf";
  auto w = gguf::Writer::create(bad.string());
  ASSERT_TRUE(w.ok()) << w.error().message;
  for (const auto& kv : src->metadata)
    w->set(kv.key, kv.key == "tokenizer.ggml.pre" ? gguf::Value::string("made-up-pre") : kv.value);
  ASSERT_TRUE(w->write_header().ok());
  ASSERT_TRUE(w->finish().ok());
  r = run_cli({"-m", bad.string(), "-p", "x"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("unknown pre-tokenizer 'made-up-pre'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace df::tokenizer
