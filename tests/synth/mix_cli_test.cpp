// synth --type MIX and inspect end to end: the command writes llama.cpp's mix, inspect counts its bytes per type.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "support/cli_run.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

TEST(SynthCommand, WritesAMixThatInspectCountsByType) {
  DF_REQUIRE_SHARED(tok, "models/qwen3moe-q4_k_m.gguf");
  const auto out = temp_dir("synth_mix") / "m.gguf";
  const CliRun w = run_cli_capture("synth --arch qwen3 --preset small --type q4_k_m --tokenizer-from " + tok.string() +
                                   " --quiet -o " + out.string());
  ASSERT_EQ(w.status, 0) << w.err;
  const CliRun r = run_cli_capture("inspect --json -m " + out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["metadata"]["general.file_type"], 15);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  const auto& types = j["bytes_by_type"];
  uint64_t sum = 0;
  for (const auto& [name, bytes] : types.items()) sum += bytes.get<uint64_t>();
  EXPECT_EQ(sum, j["tensor_bytes"].get<uint64_t>());
  // The small preset's ffn rows (1536) fill 256-blocks, the head gets Q6_K, some attn_v and ffn_down Q6_K too.
  EXPECT_TRUE(types.contains("q4_K"));
  EXPECT_TRUE(types.contains("q6_K"));
  EXPECT_TRUE(types.contains("f32"));
  const CliRun text = run_cli_capture("inspect -m " + out.string());
  EXPECT_NE(text.out.find("bytes by type:"), std::string::npos);
  const CliRun bad = run_cli_capture("synth --arch qwen3 --type q4_k_s --tokenizer-from " + tok.string() + " -o " +
                                     (out.parent_path() / "x.gguf").string());
  EXPECT_EQ(bad.status, 2);
}

}  // namespace
}  // namespace df::test
