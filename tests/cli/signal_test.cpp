// synth and convert end on SIGINT/SIGTERM without leaving their OUT.partial behind. The partial path is made a FIFO
// beforehand: the command opens it as its output and blocks writing into a 4 KiB pipe the test does not drain, so
// the signal always lands mid-write (no sleeps, no race with the command finishing first).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "store/store_test_util.h"

namespace df::test {
namespace {

namespace fs = std::filesystem;

// Starts the command on a FIFO at `partial`, waits until bytes arrive in it (the command is writing), sends `sig`,
// and returns how the command ended (128 + signal, or its exit code).
int interrupt_while_writing(const std::vector<std::string>& args, const fs::path& partial, int sig,
                            const fs::path& scratch) {
  EXPECT_EQ(::mkfifo(partial.c_str(), 0644), 0) << partial;
  // Opened first (non-blocking), so the command's open for writing does not wait for a reader.
  const int fd = ::open(partial.c_str(), O_RDONLY | O_NONBLOCK);
  EXPECT_GE(fd, 0);
  ::fcntl(fd, F_SETPIPE_SZ, 4096);
  const pid_t pid = spawn_cli(args, (scratch / "out").string(), (scratch / "err").string());
  bool writing = false;
  while (!writing) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0 && (p.revents & POLLIN)) writing = true;
    int status = 0;
    if (!writing && ::waitpid(pid, &status, WNOHANG) == pid) {
      ADD_FAILURE() << "the command ended before writing: " << slurp(scratch / "err");
      ::close(fd);
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
  ::kill(pid, sig);
  const int code = wait_child(pid);
  ::close(fd);
  return code;
}

bool exists_no_follow(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

TEST(Cli, SynthRemovesItsPartialFileOnSigint) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  const fs::path dir = temp_dir("signal_synth");
  const fs::path out = dir / "m.gguf", partial = dir / "m.gguf.partial";
  const int code = interrupt_while_writing({"synth", "--arch", "qwen3", "--type", "q8_0", "--tokenizer-from",
                                            vocab.string(), "-o", out.string(), "--quiet"},
                                           partial, SIGINT, dir);
  EXPECT_EQ(code, 128 + SIGINT) << slurp(dir / "err");
  EXPECT_FALSE(exists_no_follow(partial)) << "left behind: " << partial;
  EXPECT_FALSE(exists_no_follow(out));
}

TEST(Cli, ConvertCorpusRemovesItsPartialFileOnSigterm) {
  DF_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
  const fs::path dir = temp_dir("signal_convert");
  {
    std::ofstream text(dir / "corpus.txt");
    for (int i = 0; i < 4000; ++i) text << "word " << i << (i % 50 == 49 ? "\n\n" : " ");
  }
  const fs::path out = dir / "ids.bin", partial = dir / "ids.bin.partial";
  const int code = interrupt_while_writing({"convert", "--corpus", (dir / "corpus.txt").string(), "--tokenizer-from",
                                            vocab.string(), "-o", out.string(), "--quiet"},
                                           partial, SIGTERM, dir);
  EXPECT_EQ(code, 128 + SIGTERM) << slurp(dir / "err");
  EXPECT_FALSE(exists_no_follow(partial)) << "left behind: " << partial;
  EXPECT_FALSE(exists_no_follow(out));
}

}  // namespace
}  // namespace df::test
