#include "diskformer/engine/model_files.h"

#include <filesystem>

#include "diskformer/gguf/split.h"
#include "diskformer/store/store.h"

namespace df::engine {

Result<std::unique_ptr<ModelFiles>> open_model_files(const std::string& path) {
  auto m = std::make_unique<ModelFiles>();
  m->path = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    DF_ASSIGN(store::Store s, store::Store::open(path));
    m->from_store = true;
    m->file = s.model();
    m->records = s.records();
  } else {
    DF_ASSIGN(m->file, gguf::read_model(path));
  }
  // The tensors are checked against the spec before the record map is built from them (its errors are about
  // layout, a binding's about the model).
  DF_ASSIGN(m->spec, model::spec_from_gguf(m->file));
  DF_ASSIGN(m->tensors, model::bind_tensors(m->file, m->spec));
  if (!m->from_store) {
    DF_ASSIGN(m->records, store::RecordMap::in_place(m->file));
  }
  DF_ASSIGN(m->layouts, model::record_layouts(m->spec, m->tensors, m->records));
  for (const auto& t : m->file.tensors) m->tensor_bytes += t.n_bytes;
  return m;
}

}  // namespace df::engine
