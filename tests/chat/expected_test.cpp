// Every conversation of ../shared/templates/expected.json (rendered by Jinja2 3.1.6 under Hugging Face's
// settings) must come out byte for byte, or fail where Jinja2 failed.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "chat/reference_clock.h"
#include "diskformer/chat/template.h"
#include "support/test_paths.h"

namespace df::chat {
namespace {

using ojson = nlohmann::ordered_json;

using test::slurp;

RenderOptions reference_options() {
  RenderOptions o;
  o.now = test::reference_now();
  return o;
}

TEST(ChatExpected, EveryCaseMatchesJinja2) {
  DF_REQUIRE_SHARED(path, "templates/expected.json");
  ojson doc = ojson::parse(slurp(path));
  const auto& cases = doc.at("cases");
  ASSERT_GT(cases.size(), 0u);
  std::map<std::string, Template> parsed;
  size_t rendered = 0, errors = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const std::string name = c.at("template").get<std::string>();
    SCOPED_TRACE("case " + std::to_string(k) + " (" + name + ")");
    auto it = parsed.find(name);
    if (it == parsed.end()) {
      auto tpl = Template::parse(slurp(df::test::shared_dir() / "templates/jinja" / name), name);
      ASSERT_TRUE(tpl.ok()) << tpl.error().message;
      it = parsed.emplace(name, std::move(*tpl)).first;
    }
    ChatInput in;
    in.messages = c.at("messages");
    in.bos_token = c.at("bos_token").get<std::string>();
    in.eos_token = c.at("eos_token").get<std::string>();
    in.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    // Any further keys of a case (tools, enable_thinking, ...) are template variables too.
    ojson extra = ojson::object();
    for (const auto& [key, v] : c.items())
      if (key != "template" && key != "messages" && key != "bos_token" && key != "eos_token" &&
          key != "add_generation_prompt" && key != "expected" && key != "error")
        extra[key] = v;
    in.extra = extra;
    auto out = render_chat(it->second, in, reference_options());
    if (c.contains("error")) {
      ASSERT_FALSE(out.ok()) << "rendered where Jinja2 failed:\n" << *out;
      const std::string want = c.at("error").is_string() ? c.at("error").get<std::string>() : "";
      if (!want.empty()) {
        EXPECT_NE(out.error().message.find(want), std::string::npos) << out.error().message;
      }
      ++errors;
    } else {
      ASSERT_TRUE(out.ok()) << out.error().message;
      EXPECT_EQ(*out, c.at("expected").get<std::string>());
      ++rendered;
    }
  }
  EXPECT_EQ(rendered + errors, cases.size());
}

// The test above covers only the templates expected.json names: each template file must be among them, so that
// a family added to jinja/ does not go unchecked.
TEST(ChatExpected, EveryTemplateFileHasCases) {
  DF_REQUIRE_SHARED(path, "templates/expected.json");
  const ojson doc = ojson::parse(slurp(path));
  std::set<std::string> named;
  for (const auto& c : doc.at("cases")) named.insert(c.at("template").get<std::string>());
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(df::test::shared_dir() / "templates/jinja")) {
    if (entry.path().extension() != ".jinja") continue;
    ++files;
    EXPECT_TRUE(named.count(entry.path().filename().string())) << entry.path().filename() << " has no case";
  }
  EXPECT_GT(files, 0u);
  EXPECT_TRUE(named.count("google-gemma-4-31B-it.jinja"));
  EXPECT_TRUE(named.count("Qwen3.5-4B.jinja"));
}

}  // namespace
}  // namespace df::chat
