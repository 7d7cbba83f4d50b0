// Sessions for the tests: a CPU session never fails to be made, so a failure stops the test binary loudly.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "diskformer/engine/session.h"
#include "diskformer/sampling/sampler.h"

namespace df::test {

inline engine::Session new_session(engine::Model& m) {
  auto s = engine::Session::create(m);
  if (!s.ok()) {
    std::fprintf(stderr, "session: %s\n", s.error().message.c_str());
    std::abort();
  }
  return std::move(s).value();
}

// The prompt, then n greedy tokens fed back one at a time: the ids chosen.
inline std::vector<int32_t> greedy_ids(engine::Session& s, const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  EXPECT_TRUE(s.eval(prompt).ok());
  for (int i = 0; i < n; ++i) {
    const int32_t id = sampling::argmax(s.logits());
    out.push_back(id);
    auto st = s.eval(std::span<const int32_t>(&id, 1));
    EXPECT_TRUE(st.ok()) << st.error().message;
  }
  return out;
}

// n greedy tokens after what the session has evaluated, one eval each (the last one not fed back).
inline std::vector<int32_t> greedy_continue(engine::Session& s, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(sampling::argmax(s.logits()));
    if (i + 1 < n) {
      EXPECT_TRUE(s.eval(std::span<const int32_t>(&out.back(), 1)).ok());
    }
  }
  return out;
}

}  // namespace df::test
