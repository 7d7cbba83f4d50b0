// Ctrl-C: run stops generating, prints its stats and exits 130; chat ends the reply and takes the next line, and a
// SIGINT at its prompt (or a second one during a reply) quits with 130. The signal is sent once the CLI has written
// its first byte of text; its stdout is a pipe of one page that the test does not drain until the signal is sent,
// so the CLI is still generating when it arrives (its text is far longer than the pipe holds): no sleeps.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/tiny_model.h"
#include "support/cli_run.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

// The CLI as a child with its stdin, stdout and stderr on pipes (stderr on a terminal where asked).
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  std::string out_text, err_text;
  bool out_open = true, err_open = true;

  ~Child() {
    for (int fd : {in, out, err})
      if (fd >= 0) ::close(fd);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }

  static std::unique_ptr<Child> spawn(const std::vector<std::string>& args, bool err_on_tty = false) {
    auto c = std::make_unique<Child>();
    int pin[2], pout[2], perr[2];
    EXPECT_EQ(::pipe2(pin, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(pout, O_CLOEXEC), 0);
    if (err_on_tty) {
      EXPECT_EQ(::openpty(&perr[0], &perr[1], nullptr, nullptr, nullptr), 0);
      ::fcntl(perr[0], F_SETFD, FD_CLOEXEC);
      ::fcntl(perr[1], F_SETFD, FD_CLOEXEC);
    } else {
      EXPECT_EQ(::pipe2(perr, O_CLOEXEC), 0);
    }
    ::fcntl(pout[0], F_SETPIPE_SZ, 4096);
    std::vector<std::string> all{cli_path().string()};
    all.insert(all.end(), args.begin(), args.end());
    c->pid = ::fork();
    if (c->pid == 0) {
      ::dup2(pin[0], 0);
      ::dup2(pout[1], 1);
      ::dup2(perr[1], 2);
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    ::close(pin[0]), ::close(pout[1]), ::close(perr[1]);
    c->in = pin[1], c->out = pout[0], c->err = perr[0];
    return c;
  }

  void write_line(const std::string& s) {
    const std::string line = s + "\n";
    EXPECT_EQ(::write(in, line.data(), line.size()), ssize_t(line.size()));
  }

  // Reads stderr, and stdout where read_out, until done() holds or both are closed. A minute without a byte is a
  // hang (the command ignored the signal): the test fails instead of waiting forever.
  void pump(bool read_out, const std::function<bool()>& done) {
    int idle = 0;
    while (!done() && (out_open || err_open)) {
      pollfd p[2] = {{read_out && out_open ? out : -1, POLLIN, 0}, {err_open ? err : -1, POLLIN, 0}};
      if (::poll(p, 2, 100) <= 0) {
        if (++idle > 600) {
          ADD_FAILURE() << "no output for a minute; stderr so far:\n" << err_text;
          return;
        }
        continue;
      }
      idle = 0;
      char buf[4096];
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::read(p[i].fd, buf, sizeof buf);
        if (n <= 0) {
          (i == 0 ? out_open : err_open) = false;  // a pty reads EIO once the child is gone
          continue;
        }
        (i == 0 ? out_text : err_text).append(buf, size_t(n));
      }
    }
  }

  int finish() {
    pump(true, [] { return false; });
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

// Waits until no SIGINT is pending for the process (/proc/PID/status: SigPnd, ShdPnd), that is until its handler
// has been entered: a second signal sent then is not merged into the first.
void wait_delivered(pid_t pid) {
  for (;;) {
    std::ifstream st("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    bool pending = false, seen = false;
    while (std::getline(st, line))
      if (line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0) {
        seen = true;
        pending |= (std::stoull(line.substr(7), nullptr, 16) >> (SIGINT - 1)) & 1;
      }
    if (!seen || !pending) return;
    ::poll(nullptr, 0, 1);
  }
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// A tiny model with the llama SentencePiece vocabulary, sampled at a high temperature: text of many bytes a token,
// without end (--ignore-eos, -n -1).
class CliProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto vocab = shared_dir() / "vocab/ggml-vocab-llama-spm.gguf";
    if (!std::filesystem::exists(vocab)) GTEST_SKIP() << "missing shared file " << vocab;
    path_ = (temp_dir("interrupt") / "m.gguf").string();
    TinyModel m;
    m.tokenizer_from = vocab.string();
    ASSERT_TRUE(write_tiny_model(path_, m).ok());
  }
  std::vector<std::string> args(const std::string& command) const {
    return {command, "-m", path_, "-n", "-1", "--ignore-eos", "--temp", "1.5", "--top-k", "0", "--top-p", "1",
            "--min-p", "0", "--seed", "3", "-c", "8192", "-t", "1", "--backend", "cpu"};
  }
  std::string path_;
};

TEST_F(CliProcess, RunStopsPrintsItsStatsAndExits130) {
  auto a = args("run");
  a.insert(a.end(), {"-p", "Once upon a time"});
  auto c = Child::spawn(a);
  c->pump(true, [&] { return !c->out_text.empty(); });
  ASSERT_FALSE(c->out_text.empty()) << c->err_text;
  ::kill(c->pid, SIGINT);
  EXPECT_EQ(c->finish(), 130) << c->err_text;
  EXPECT_NE(c->err_text.find("diskformer run: interrupted"), std::string::npos) << c->err_text;
  EXPECT_NE(c->err_text.find("diskformer run: backend cpu, prompt"), std::string::npos) << c->err_text;
}

TEST_F(CliProcess, ChatEndsTheReplyThenQuitsAtThePrompt) {
  auto a = args("chat");
  a.push_back("--json-stats");
  auto c = Child::spawn(a);
  for (const char* line : {"Hello", "And then?"}) {
    const size_t before = c->out_text.size(), notes = count(c->err_text, "reply interrupted");
    c->write_line(line);
    c->pump(true, [&] { return c->out_text.size() > before; });
    ASSERT_GT(c->out_text.size(), before) << c->err_text;
    ::kill(c->pid, SIGINT);
    // The reply ends; its stats follow, and the chat waits for the next line.
    c->pump(true, [&] { return count(c->err_text, "\"stop\":\"stopped\"") > notes; });
    ASSERT_EQ(count(c->err_text, "reply interrupted"), notes + 1) << c->err_text;
  }
  ::kill(c->pid, SIGINT);  // at the prompt: quits
  EXPECT_EQ(c->finish(), 130) << c->err_text;
  // Each reply's stats as one JSON object on a line of its own.
  int turns = 0;
  size_t at = 0;
  while ((at = c->err_text.find("{\"backend\"", at)) != std::string::npos) {
    const auto j = nlohmann::json::parse(c->err_text.substr(at, c->err_text.find('\n', at) - at));
    EXPECT_EQ(j["stop"], "stopped");
    EXPECT_EQ(j["turn"], ++turns);
    EXPECT_GT(j["gen_tokens"].get<int64_t>(), 0);
    ++at;
  }
  EXPECT_EQ(turns, 2);
}

TEST_F(CliProcess, ASecondSigintDuringAReplyQuits) {
  auto c = Child::spawn(args("chat"));
  c->write_line("Hello");
  c->pump(true, [&] { return !c->out_text.empty(); });
  ASSERT_FALSE(c->out_text.empty()) << c->err_text;
  // The first asks the reply to stop (the chat is blocked writing it: stdout is not drained); the second, once the
  // first has been taken, ends the process.
  ::kill(c->pid, SIGINT);
  wait_delivered(c->pid);
  ::kill(c->pid, SIGINT);
  EXPECT_EQ(c->finish(), 130) << c->err_text;
}

// Opening a model draws a bar on a terminal and nothing where stderr is not one.
TEST_F(CliProcess, LoadingShowsProgressOnATerminalOnly) {
  const std::vector<std::string> a = {"run", "-m", path_, "-p", "hi", "-n", "2", "-t", "1", "--backend", "cpu"};
  auto tty = Child::spawn(a, /*err_on_tty=*/true);
  ::close(tty->in), tty->in = -1;
  EXPECT_EQ(tty->finish(), 0) << tty->err_text;
  EXPECT_NE(tty->err_text.find("diskformer run: loading ["), std::string::npos) << tty->err_text;
  EXPECT_NE(tty->err_text.find("100%"), std::string::npos) << tty->err_text;
  EXPECT_NE(tty->err_text.find("\r\033[K"), std::string::npos);  // erased before the log lines
  auto pipe = Child::spawn(a);
  ::close(pipe->in), pipe->in = -1;
  EXPECT_EQ(pipe->finish(), 0) << pipe->err_text;
  EXPECT_EQ(pipe->err_text.find("loading"), std::string::npos) << pipe->err_text;
  EXPECT_EQ(pipe->err_text.find('\r'), std::string::npos);
  // --quiet draws no bar on a terminal either.
  auto quiet_args = a;
  quiet_args.push_back("--quiet");
  auto quiet = Child::spawn(quiet_args, true);
  ::close(quiet->in), quiet->in = -1;
  EXPECT_EQ(quiet->finish(), 0) << quiet->err_text;
  EXPECT_EQ(quiet->err_text.find("loading"), std::string::npos) << quiet->err_text;
}

}  // namespace
}  // namespace df::test
