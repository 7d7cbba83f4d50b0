// Finding a family's tensors by name and checking them against the shapes its spec implies (the bindings of
// weights.cpp and qwen35.cpp).
#pragma once

#include <string>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/model/weights.h"
#include "diskformer/util/result.h"

namespace df::model {

inline std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct Binder {
  const gguf::File& f;

  // want: the expected ggml shape (shape[0] = row length); matmul: any type the kernels multiply, else f32.
  Result<const gguf::TensorInfo*> need(const std::string& name, std::vector<uint64_t> want, bool matmul) {
    const gguf::TensorInfo* t = f.tensor(name);
    if (!t) return Error{f.path + ": tensor " + name + " is missing"};
    return check(t, std::move(want), matmul);
  }
  Result<const gguf::TensorInfo*> check(const gguf::TensorInfo* t, std::vector<uint64_t> want, bool matmul) {
    std::vector<uint64_t> got = t->shape;
    while (got.size() > want.size() && got.back() == 1) got.pop_back();
    if (got != want)
      return Error{f.path + ": tensor " + t->name + " has shape " + shape_text(t->shape) + ", expected " +
                   shape_text(want) + " (at offset " + std::to_string(t->info_offset) + ")"};
    if (matmul ? !matmul_type_supported(t->type) : t->type != gguf::GgmlType::F32)
      return Error{f.path + ": tensor " + t->name + " has unsupported type " +
                   std::string(gguf::type_name(t->type)) +
                   (matmul ? " (supported: " + matmul_type_names() + ")" : " (norm weights must be f32)")};
    return t;
  }
};

}  // namespace df::model
