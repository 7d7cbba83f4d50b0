// Sessions for the tests: a CPU session never fails to be made, so a failure stops the test binary loudly.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "diskformer/engine/session.h"

namespace df::test {

inline engine::Session new_session(engine::Model& m) {
  auto s = engine::Session::create(m);
  if (!s.ok()) {
    std::fprintf(stderr, "session: %s\n", s.error().message.c_str());
    std::abort();
  }
  return std::move(s).value();
}

}  // namespace df::test
