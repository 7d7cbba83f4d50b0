// `diskformer render-template`: stdout is the prompt byte for byte; failures exit 1 (2 for usage) with one line.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "chat/reference_clock.h"
#include "diskformer/gguf/writer.h"
#include "support/cli_run.h"
#include "support/test_paths.h"

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

using df::test::CliRun;
using df::test::slurp;

void write(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

CliRun run_cli(const std::string& args, const std::string& stdin_text = "") {
  return df::test::run_cli_capture("render-template " + args, stdin_text);
}

TEST(ChatCli, TemplateFileMatchesJinja2ByteForByte) {
  DF_REQUIRE_SHARED(expected, "templates/expected.json");
  ojson doc = ojson::parse(slurp(expected));
  fs::path dir = df::test::temp_dir("cli");
  int checked = 0;
  for (const auto& c : doc.at("cases")) {
    if (!c.contains("expected")) continue;
    // One case per template keeps the test quick; the library test covers every case.
    static std::set<std::string> seen;
    std::string name = c.at("template").get<std::string>();
    if (!seen.insert(name).second) continue;
    SCOPED_TRACE(name);
    write(dir / "messages.json", c.at("messages").dump());
    std::string args = "--template " + quote((df::test::shared_dir() / "templates/jinja" / name).string()) +
                       " --messages " + quote((dir / "messages.json").string()) +
                       " --bos " + quote(c.at("bos_token").get<std::string>()) +
                       " --eos " + quote(c.at("eos_token").get<std::string>()) +
                       (c.at("add_generation_prompt").get<bool>() ? "" : " --no-generation-prompt") +
                       " --now '" + df::test::kReferenceNow + "'";
    CliRun r = run_cli(args);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, c.at("expected").get<std::string>());
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(ChatCli, MessagesObjectCarriesToolsAndVariables) {
  fs::path dir = df::test::temp_dir("cli");
  write(dir / "t.jinja",
        "{{ bos_token }}{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}"
        "{% for t in tools %}{{ t.name }}{{ t | tojson }}{% endfor %}|{{ enable_thinking }}|{{ add_generation_prompt }}");
  write(dir / "m.json",
        R"({"messages": [{"role": "user", "content": "héllo"}], "tools": [{"name": "f", "z": 1, "a": [true]}],)"
        R"( "enable_thinking": false})");
  CliRun r = run_cli("--template " + quote((dir / "t.jinja").string()) + " --messages " +
                           quote((dir / "m.json").string()) + " --bos '<s>' --no-generation-prompt");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, R"(<s>user=héllo;f{"name": "f", "z": 1, "a": [true]}|False|False)");
  EXPECT_EQ(r.err, "");
  // The same messages from stdin.
  r = run_cli("--template " + quote((dir / "t.jinja").string()) + " --messages - --bos '<s>'",
              slurp(dir / "m.json"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, R"(<s>user=héllo;f{"name": "f", "z": 1, "a": [true]}|False|True)");
}

TEST(ChatCli, DeeplyNestedMessagesAreRefusedWithFileAndDepth) {
  const fs::path dir = df::test::temp_dir("chat_cli_deep");
  std::ofstream(dir / "t.jinja") << "{{ messages|length }}";
  const fs::path messages = dir / "deep.json";
  std::ofstream(messages) << R"({"messages": [{"role": "user", "content": )" << std::string(20000, '[') << "0"
                          << std::string(20000, ']') << "}]}";
  CliRun r = run_cli("--template " + quote((dir / "t.jinja").string()) + " --messages " + quote(messages.string()));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find(messages.string() + ": JSON nested 20003 levels deep, deeper than the 512"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(ChatCli, ModelTemplateAndSpecialTokensComeFromTheGguf) {
  fs::path dir = df::test::temp_dir("cli");
  {
    auto w = df::gguf::Writer::create((dir / "tiny.gguf").string());
    ASSERT_TRUE(w.ok()) << w.error().message;
    w->set("general.architecture", df::gguf::Value::string("llama"));
    w->set("tokenizer.chat_template",
           df::gguf::Value::string("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"));
    std::vector<df::gguf::Value> tokens;
    for (const char* t : {"<unk>", "<s>", "</s>"}) tokens.push_back(df::gguf::Value::string(t));
    w->set("tokenizer.ggml.tokens", df::gguf::Value::array(df::gguf::ValueType::STRING, std::move(tokens)));
    w->set("tokenizer.ggml.bos_token_id", df::gguf::Value::u32(1));
    w->set("tokenizer.ggml.eos_token_id", df::gguf::Value::u32(2));
    ASSERT_TRUE(w->write_header().ok());
    ASSERT_TRUE(w->finish().ok());
  }
  write(dir / "m.json", R"([{"role": "user", "content": "hi"}])");
  const std::string base = "-m " + quote((dir / "tiny.gguf").string()) + " --messages " + quote((dir / "m.json").string());
  CliRun r = run_cli(base);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "<s>hi</s>");
  r = run_cli(base + " --eos '[END]'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "<s>hi[END]");
}

TEST(ChatCli, RealModelTemplate) {
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q4_0.gguf");
  fs::path dir = df::test::temp_dir("cli");
  write(dir / "m.json", R"([{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}])");
  CliRun r = run_cli("-m " + quote(model.string()) + " --messages " + quote((dir / "m.json").string()));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatCli, FailuresExitOneWithOneClearLine) {
  fs::path dir = df::test::temp_dir("cli");
  write(dir / "bad.jinja", "ok\n{% for x in messages %}\n{{ x.role + }}\n{% endfor %}");
  write(dir / "good.jinja", "{{ messages|length }}{{ raise_exception('no ' ~ 'way') if messages|length > 1 }}");
  write(dir / "m.json", R"([{"role": "user", "content": "a"}])");
  write(dir / "two.json", R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  write(dir / "broken.json", R"([{"role": "user", "content": "a"})");
  auto args = [&](const char* tpl, const char* msgs) {
    return "--template " + quote((dir / tpl).string()) + " --messages " + quote((dir / msgs).string());
  };
  CliRun r = run_cli(args("bad.jinja", "m.json"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("bad.jinja:3:13: template syntax error"), std::string::npos) << r.err;
  r = run_cli(args("good.jinja", "broken.json"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("broken.json: invalid JSON at byte"), std::string::npos) << r.err;
  r = run_cli(args("good.jinja", "two.json"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("good.jinja:1: no way"), std::string::npos) << r.err;
  r = run_cli(args("good.jinja", "m.json"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "1");
  r = run_cli(args("missing.jinja", "m.json"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("missing.jinja"), std::string::npos) << r.err;
  r = run_cli("--messages " + quote((dir / "m.json").string()));
  EXPECT_EQ(r.status, 2);
  r = run_cli(args("good.jinja", "m.json") + " --now 2026-13-01");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--now \"2026-13-01\""), std::string::npos) << r.err;
  r = run_cli(args("good.jinja", "m.json") + " --now 2026-02-30");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--now \"2026-02-30\""), std::string::npos) << r.err;
}

TEST(ChatCli, NowFixesStrftimeNow) {
  fs::path dir = df::test::temp_dir("cli");
  write(dir / "t.jinja", "{{ strftime_now('%A %d %B %Y %H:%M') }}");
  write(dir / "m.json", "[]");
  std::string args =
      "--template " + quote((dir / "t.jinja").string()) + " --messages " + quote((dir / "m.json").string());
  CliRun r = run_cli(args + " --now '2026-11-29 12:34:56'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "Sunday 29 November 2026 12:34");
  r = run_cli(args + " --now 2024-02-29");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "Thursday 29 February 2024 00:00");
}

}  // namespace
