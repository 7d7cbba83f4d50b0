// A small option parser that follows llama.cpp's spellings (-m/--model, -p/--prompt, ...).
// Usage errors print one line and the usage, and exit 2 (../docs/CLI.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace df::cli {

class Args {
 public:
  Args(std::string command, std::string synopsis);

  // names: "-m,--model".  A flag takes no value; an option takes one (metavar names it in the help).
  void flag(const std::string& names, const std::string& help);
  void option(const std::string& names, const std::string& metavar, const std::string& help);

  // Parses argv[first..]. On --help prints the help and returns false with exit_code 0;
  // on a usage error prints it and returns false with exit_code 2.
  bool parse(int argc, char** argv, int first = 2);
  int exit_code() const { return exit_code_; }

  bool has(const std::string& name) const;  // name: any spelling, e.g. "--model"
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;

  // Typed getters: a value that does not parse, or lies outside [min, max], is a usage error naming the option
  // (printed; exit_code 2; returns nullopt). Every caller states its range, so a value never wraps when it is
  // narrowed (-n 4294967297 is not 1). Doubles must be finite: nan and inf are refused whatever the range.
  std::optional<int64_t> get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max);
  std::optional<double> get_double(const std::string& name, double fallback, double min, double max);
  std::optional<std::optional<uint64_t>> get_size(const std::string& name);  // SIZE, absent = nullopt inside

  // Reports a usage error (missing required option, conflicting flags): prints it, sets exit_code 2.
  int usage_error(const std::string& message);
  // A line on stderr that does not stop the command ("diskformer CMD: warning: ...").
  void warn(const std::string& message) const;
  std::string help() const;

 private:
  struct Spec {
    std::vector<std::string> names;
    std::string metavar;
    std::string help;
    bool takes_value = false;
  };
  const Spec* find(const std::string& name) const;
  std::string spelled(const std::string& name) const;  // "-n/--n-predict": every spelling, as the help lists them

  std::string command_, synopsis_;
  std::vector<Spec> specs_;
  std::vector<std::pair<std::string, std::string>> values_;  // canonical name (first spelling) -> value
  int exit_code_ = 0;
};

// -t beyond the machine's hardware threads is allowed (a shared machine, a test) but worth a warning.
void warn_threads(const Args& args, int64_t threads);

}  // namespace df::cli
