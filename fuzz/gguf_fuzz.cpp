// libFuzzer entry: the GGUF header parser over arbitrary bytes must return a value or an error, never crash,
// and every tensor it accepts must lie inside the input.
#include <cstdint>
#include <cstdlib>

#include "diskformer/gguf/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto src = df::gguf::memory_source(data, size);
  auto r = df::gguf::parse(*src, "fuzz.gguf");
  if (!r.ok()) return 0;
  for (const auto& t : r->tensors)
    if (t.offset > size || t.n_bytes > size - t.offset || t.offset % r->alignment != 0) std::abort();
  for (const auto& kv : r->metadata) (void)kv.value.summary();
  return 0;
}
