// inspect's tables show a file's texts escaped: metadata holding terminal escape sequences (ESC [ 2J, a C1 CSI, BEL,
// DEL, bytes that are not UTF-8) prints as visible escapes, never as the control characters themselves.
#include <gtest/gtest.h>

#include <string>

#include "cli/small_gguf.h"
#include "diskformer/gguf/value.h"
#include "support/cli_run.h"

namespace df::test {
namespace {

TEST(Cli, InspectEscapesControlCharactersFromMetadata) {
  const auto dir = temp_dir("inspect_escape");
  const std::string path = (dir / "evil.gguf").string();
  write_small_gguf(path, {{"general.architecture", "ar\x1b[2Jch"},
                          {"general.name", "red\x1b[31m bell\x07 del\x7f csi\xc2\x9b" "1m bad\xff ok \xc3\xa9"},
                          {"evil.\x1b]0;title\x07key", "tab\there\nnewline \\x1b"}});
  const CliRun r = run_cli_capture("inspect -m " + path);
  ASSERT_EQ(r.status, 0) << r.err;
  for (unsigned char c : r.out) {
    EXPECT_TRUE(c >= 0x20 || c == '\n') << "control byte " << int(c) << " in:\n" << r.out;
    EXPECT_NE(c, 0x7f);
  }
  EXPECT_EQ(r.out.find("\xc2\x9b"), std::string::npos) << "a C1 control came through";
  EXPECT_NE(r.out.find("architecture: ar\\x1b[2Jch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("name: red\\x1b[31m bell\\x07 del\\x7f csi\\u009b1m bad\\xff ok \xc3\xa9"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("evil.\\x1b]0;title\\x07key"), std::string::npos) << r.out;
  // A backslash in the text is escaped too, so that "\x1b" written out cannot pass for an escaped ESC.
  EXPECT_NE(r.out.find("\"tab\\there\\nnewline \\\\x1b\""), std::string::npos) << r.out;
}

TEST(GgufPrintable, KeepsUtf8AndCutsBetweenCharacters) {
  EXPECT_EQ(gguf::printable("caf\xc3\xa9 \xf0\x9f\x9a\x80"), "caf\xc3\xa9 \xf0\x9f\x9a\x80");
  EXPECT_EQ(gguf::printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate is not UTF-8
  EXPECT_EQ(gguf::printable("a\"b", true), "\"a\\\"b\"");
  EXPECT_EQ(gguf::printable("\x1b\x1b\x1b", false, 6), "\\x1b...");
}

}  // namespace
}  // namespace df::test
