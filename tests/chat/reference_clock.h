// The time ../shared/templates/expected.json was rendered at: its renderer fixed strftime_now() there (the file's
// "renderer" field says so), so renderings compared with it must use the same time, not today's.
#pragma once

#include <ctime>

namespace df::test {

inline constexpr const char* kReferenceNow = "2026-11-29 12:00:00";  // as render-template --now takes it

inline std::tm reference_now() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 29;
  tm.tm_hour = 12;
  tm.tm_wday = 0;  // a Sunday
  tm.tm_yday = 332;
  return tm;
}

}  // namespace df::test
