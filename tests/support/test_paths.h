// Paths the tests read: ../shared beside the checkout, the source tree, the built CLI.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace df::test {

std::filesystem::path shared_dir();
std::filesystem::path source_dir();
std::filesystem::path cli_path();
// A fresh, empty directory under the temp area, removed with the binary's others when all its tests pass and left
// for inspection when one fails.
std::filesystem::path temp_dir(const std::string& name);
// A whole file's bytes ("" where it cannot be read: the caller's assertions say what was expected).
std::string slurp(const std::filesystem::path& p);

}  // namespace df::test

// Skips the current test with a message when a file of ../shared is missing (a checkout without shared/).
#define DF_REQUIRE_SHARED(var, rel)                                                      \
  const std::filesystem::path var = ::df::test::shared_dir() / (rel);                   \
  if (!std::filesystem::exists(var)) GTEST_SKIP() << "missing shared file " << var.string()
