#include "cli/args.h"

#include <cstdio>
#include <sstream>

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

std::optional<int64_t> Args::get_int(const std::string& name, int64_t fallback) {
  auto v = get(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    long long x = std::stoll(*v, &used, 0);
    if (used == v->size()) return x;
  } catch (...) {
  }
  usage_error("option '" + name + "' expects an integer, got '" + *v + "'");
  return std::nullopt;
}

std::optional<double> Args::get_double(const std::string& name, double fallback) {
  auto v = get(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    double x = std::stod(*v, &used);
    if (used == v->size()) return x;
  } catch (...) {
  }
  usage_error("option '" + name + "' expects a number, got '" + *v + "'");
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
