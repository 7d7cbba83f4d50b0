// The greedy cases beyond the shared gold files (tests/data/cases/*.json, made with llama.cpp's CPU backend; the
// format is in each file's "reference"): their names, and each one's model, which `synth` writes from the seed the
// file names or which ../shared holds. The CPU and the GPU case tests read them alike.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/cli_run.h"
#include "support/test_paths.h"

namespace df::test {

inline std::filesystem::path cases_dir() { return std::filesystem::path(DF_SOURCE_DIR) / "tests/data/cases"; }

inline std::vector<std::string> case_files() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(cases_dir()))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

inline nlohmann::json read_case_file(const std::string& name) {
  std::ifstream in(cases_dir() / (name + ".json"));
  return nlohmann::json::parse(in);
}

// The shared file a case file needs: its model, or the model whose tokenizer `synth` copies.
inline std::string case_shared_file(const nlohmann::json& doc) {
  const auto& m = doc["model"];
  return m.contains("shared") ? m["shared"] : m["tokenizer_from"];
}

// The case file's model: the shared file itself, or one that `synth` writes into the test's scratch folder (empty
// after a failure). shared: case_shared_file's path, found.
inline std::string case_model_path(const nlohmann::json& doc, const std::string& name,
                                   const std::filesystem::path& shared) {
  const auto& m = doc["model"];
  if (m.contains("shared")) return shared.string();
  const std::string path = (temp_dir("cases_" + name) / "model.gguf").string();
  std::string args = "synth";
  for (const auto& a : m["synth"]) args.append(" ").append(a.get<std::string>());
  const CliRun r = run_cli_capture(args + " --tokenizer-from " + shared.string() + " --quiet -o " + path);
  EXPECT_EQ(r.status, 0) << r.err;
  return r.status == 0 ? path : std::string();
}

// A gtest name from a case file's name.
inline std::string case_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (auto& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

}  // namespace df::test
