#include "diskformer/util/size.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace df {

Result<uint64_t> parse_size(std::string_view text) {
  std::string s(text);
  auto bad = [&] {
    return Error{"invalid size '" + s + "': expected bytes or a number with K, M, G or T (e.g. 512M, 1.8G, 4GiB)"};
  };
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return bad();
  double number = 0;
  try {
    size_t used = 0;
    number = std::stod(s.substr(0, i), &used);
    if (used != i) return bad();
  } catch (...) {
    return bad();
  }
  std::string unit = s.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() >= 3 && unit.substr(unit.size() - 2) == "IB") unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit.back() == 'B') unit.resize(1);
  else if (unit == "B") unit.clear();
  double mult = 1;
  if (unit.empty()) mult = 1;
  else if (unit == "K") mult = 1024.0;
  else if (unit == "M") mult = 1024.0 * 1024;
  else if (unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else return bad();
  double bytes = std::floor(number * mult);
  if (!(bytes >= 0) || bytes > 1.8e19) return bad();
  return static_cast<uint64_t>(bytes);
}

std::string format_size(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace df
