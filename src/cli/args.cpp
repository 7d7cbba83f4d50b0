#include "cli/args.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <thread>

#include "diskformer/util/size.h"

namespace df::cli {

Args::Args(std::string command, std::string synopsis) : command_(std::move(command)), synopsis_(std::move(synopsis)) {
  flag("-h,--help", "show this help");
}

static std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream ss(names);
  std::string n;
  while (std::getline(ss, n, ',')) out.push_back(n);
  return out;
}

void Args::flag(const std::string& names, const std::string& help) {
  specs_.push_back({split_names(names), "", help, false});
}

void Args::option(const std::string& names, const std::string& metavar, const std::string& help) {
  specs_.push_back({split_names(names), metavar, help, true});
}

const Args::Spec* Args::find(const std::string& name) const {
  for (const auto& s : specs_)
    for (const auto& n : s.names)
      if (n == name) return &s;
  return nullptr;
}

int Args::usage_error(const std::string& message) {
  std::fprintf(stderr, "diskformer %s: %s\n%s", command_.c_str(), message.c_str(), help().c_str());
  exit_code_ = 2;
  return 2;
}

void Args::warn(const std::string& message) const {
  std::fprintf(stderr, "diskformer %s: warning: %s\n", command_.c_str(), message.c_str());
}

bool Args::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_inline = false;
    if (arg.rfind("--", 0) == 0) {
      auto eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_inline = true;
      }
    }
    const Spec* spec = find(arg);
    if (!spec) {
      usage_error("unknown option '" + arg + "'");
      return false;
    }
    if (spec->names.back() == "--help") {
      std::fputs(help().c_str(), stdout);
      exit_code_ = 0;
      return false;
    }
    if (spec->takes_value) {
      if (!has_inline) {
        if (i + 1 >= argc) {
          usage_error("option '" + arg + "' needs a value (" + spec->metavar + ")");
          return false;
        }
        value = argv[++i];
      }
    } else if (has_inline) {
      usage_error("option '" + arg + "' takes no value");
      return false;
    }
    const std::string& canonical = spec->names.front();
    bool replaced = false;
    for (auto& [k, v] : values_)
      if (k == canonical) {
        v = value;  // the last occurrence wins, as in llama.cpp
        replaced = true;
      }
    if (!replaced) values_.emplace_back(canonical, value);
  }
  return true;
}

bool Args::has(const std::string& name) const {
  const Spec* spec = find(name);
  if (!spec) return false;
  for (const auto& [k, v] : values_)
    if (k == spec->names.front()) return true;
  return false;
}

std::optional<std::string> Args::get(const std::string& name) const {
  const Spec* spec = find(name);
  if (!spec) return std::nullopt;
  for (const auto& [k, v] : values_)
    if (k == spec->names.front()) return v;
  return std::nullopt;
}

std::string Args::get_or(const std::string& name, const std::string& fallback) const {
  auto v = get(name);
  return v ? *v : fallback;
}

std::string Args::spelled(const std::string& name) const {
  const Spec* spec = find(name);
  if (!spec) return name;
  std::string out;
  for (const auto& n : spec->names) out += (out.empty() ? "" : "/") + n;
  return out;
}

namespace {

// "from -1 to 2147483647", "at least 0": the range as the error states it (the type's limits go unsaid).
template <typename T>
std::string range_text(T min, T max, T lowest, T highest, std::string (*show)(T)) {
  if (min != lowest && max != highest) return "from " + show(min) + " to " + show(max);
  if (min != lowest) return "at least " + show(min);
  if (max != highest) return "at most " + show(max);
  return "";
}

std::string int_text(int64_t v) { return std::to_string(v); }

std::string double_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::optional<int64_t> Args::get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) {
  auto v = get(name);
  if (!v) return fallback;
  const std::string range = range_text<int64_t>(min, max, INT64_MIN, INT64_MAX, int_text);
  const std::string expects = "option " + spelled(name) + " expects an integer" + (range.empty() ? "" : " " + range);
  try {
    size_t used = 0;
    // Decimal, as llama.cpp reads its integers: "010" is ten, not an octal eight. Throws out_of_range beyond int64.
    const long long x = std::stoll(*v, &used, 10);
    if (used == v->size() && x >= min && x <= max) return x;
  } catch (...) {
  }
  usage_error(expects + ", got '" + *v + "'");
  return std::nullopt;
}

std::optional<double> Args::get_double(const std::string& name, double fallback, double min, double max) {
  auto v = get(name);
  if (!v) return fallback;
  const std::string range = range_text<double>(min, max, -HUGE_VAL, HUGE_VAL, double_text);
  const std::string expects =
      "option " + spelled(name) + " expects a finite number" + (range.empty() ? "" : " " + range);
  try {
    size_t used = 0;
    const double x = std::stod(*v, &used);  // throws out_of_range on overflow; nan and inf parse, and are refused
    if (used == v->size() && std::isfinite(x) && x >= min && x <= max) return x;
  } catch (...) {
  }
  usage_error(expects + ", got '" + *v + "'");
  return std::nullopt;
}

std::optional<std::optional<uint64_t>> Args::get_size(const std::string& name) {
  auto v = get(name);
  if (!v) return std::optional<uint64_t>{};
  auto r = parse_size(*v);
  if (!r) {
    usage_error("option '" + name + "': " + r.error().message);
    return std::nullopt;
  }
  return std::optional<uint64_t>{*r};
}

void warn_threads(const Args& args, int64_t threads) {
  const unsigned hardware = std::thread::hardware_concurrency();
  if (hardware > 0 && threads > int64_t(hardware))
    args.warn("-t " + std::to_string(threads) + " is more than the " + std::to_string(hardware) +
              " hardware threads of this machine; threads beyond them only wait for a core");
}

std::string Args::help() const {
  std::string out = "usage: diskformer " + command_ + " " + synopsis_ + "\n";
  for (const auto& s : specs_) {
    std::string left;
    for (size_t i = 0; i < s.names.size(); ++i) left += (i ? ", " : "") + s.names[i];
    if (s.takes_value) left += " " + s.metavar;
    char line[512];
    std::snprintf(line, sizeof line, "  %-30s %s\n", left.c_str(), s.help.c_str());
    out += line;
  }
  return out;
}

}  // namespace df::cli
