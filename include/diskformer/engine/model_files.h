// What `-m PATH` names, opened: a GGUF file (its records read in place) or a store directory made by `ingest`
// (records repacked, one read per expert). Either way the same header (metadata, tensor index), the same spec and
// tensor bindings, and a store::RecordMap that says where every resident tensor and every record lies.
#pragma once

#include <memory>
#include <string>

#include "diskformer/gguf/reader.h"
#include "diskformer/model/records.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/store/record.h"
#include "diskformer/util/result.h"

namespace df::engine {

struct ModelFiles {
  std::string path;            // as given
  bool from_store = false;
  gguf::File file;             // the GGUF header (a store's header.gguf): metadata and tensor index
  store::RecordMap records;    // ranges in the GGUF, or in the store's data.bin
  model::ModelSpec spec;
  model::ModelTensors tensors;  // points into file: a ModelFiles stays where it was made
  model::RecordLayouts layouts;
  uint64_t tensor_bytes = 0;   // every tensor's bytes, as the GGUF holds them

  ModelFiles() = default;
  ModelFiles(const ModelFiles&) = delete;
  ModelFiles& operator=(const ModelFiles&) = delete;
};

// Errors name the file: not a GGUF or a store, an incomplete or stale store, an unsupported architecture, a missing
// or misshapen tensor, a weight type without kernels (before any weight is read).
Result<std::unique_ptr<ModelFiles>> open_model_files(const std::string& path);

}  // namespace df::engine
