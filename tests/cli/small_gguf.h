// A GGUF of metadata and one small tensor, written through gguf::Writer: enough for inspect, no ../shared needed.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "diskformer/gguf/writer.h"

namespace df::test {

inline void write_small_gguf(const std::string& path,
                             const std::vector<std::pair<std::string, std::string>>& strings = {}) {
  auto w = gguf::Writer::create(path);
  ASSERT_TRUE(w.ok()) << w.error().message;
  w->set("general.name", gguf::Value::string("small"));
  for (const auto& [k, v] : strings) w->set(k, gguf::Value::string(v));
  ASSERT_TRUE(w->add_tensor("output_norm.weight", gguf::GgmlType::F32, {8}).ok());
  ASSERT_TRUE(w->write_header().ok());
  const std::vector<float> ones(8, 1.0f);
  ASSERT_TRUE(w->write_data(ones.data(), ones.size() * sizeof(float)).ok());
  auto st = w->finish();
  ASSERT_TRUE(st.ok()) << st.error().message;
}

}  // namespace df::test
