// A repacked store made by `diskformer ingest`, opened as a model source. A store directory holds:
//
//   manifest.json         {"format": "diskformer-store", "layout_version": 1, "planes": "none",
//                          "source": {location, size, mtime_ns, etag, last_modified, header_bytes, header_hash},
//                          "split_parts": [the same for each further part of a split GGUF],
//                          "data_bytes": N, "records": {globals, layers, expert_layers, tables}}
//                         written last: a directory without it is not a complete store.
//   header.gguf           the source's GGUF header, bytes [0, header_bytes): metadata and tensor index
//   header-0000K.gguf     a split source: the header of its part K (K = 2, 3, ...)
//   data.bin              the records (RecordMap::repacked's layout for that layout_version)
//   ingest.progress.json  only while an ingest is unfinished: its checkpoint, with the hash of the source bytes the
//                         last checkpoint added ("verify": {from, to, hash})
//   ingest.lock           flock'd by the ingest writing the directory (one writer at a time)
//
// A store is used only when its layout version is this build's, its record table is the one its header gives, and
// (where a source is named) the source still has the fingerprint it was made from; otherwise open() refuses with
// what differs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/store/record.h"
#include "diskformer/store/source.h"
#include "diskformer/util/result.h"

namespace df::store {

// Version 1: RecordMap::repacked's layout, quantized blocks stored as they are in the GGUF (planes "none"). A later
// version may split quant blocks into a value plane and a scale plane ("planes": "values+scales"); this build
// refuses any version or planes value it does not write.
constexpr uint32_t kLayoutVersion = 1;
constexpr const char* kPlanesNone = "none";
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kHeaderFile = "header.gguf";
constexpr const char* kDataFile = "data.bin";
constexpr const char* kProgressFile = "ingest.progress.json";
constexpr const char* kLockFile = "ingest.lock";
// header.gguf for part 0, header-0000K.gguf for part K-1 of a split source.
std::string header_file(uint32_t part);

struct StoreOptions {
  // A path or URL to check the store against (size, mtime or ETag, header hash); empty: trust the manifest.
  std::string source;
  HttpOptions http;
};

class Store {
 public:
  static Result<Store> open(const std::string& dir, const StoreOptions& options = {});
  // A directory holding a manifest.json (complete or not, it is meant as a store).
  static bool looks_like_store(const std::string& path);

  const std::string& dir() const { return dir_; }
  const gguf::File& model() const { return model_; }      // tensor offsets in it are the source's
  const RecordMap& records() const { return records_; }   // ranges in dir/data.bin
  const std::vector<Fingerprint>& sources() const { return sources_; }  // one per part of the source
  uint32_t layout_version() const { return layout_version_; }

 private:
  std::string dir_;
  gguf::File model_;
  RecordMap records_;
  std::vector<Fingerprint> sources_;
  uint32_t layout_version_ = 0;
};

// What an engine loads from `-m PATH`: a GGUF (records in place) or a store directory (records repacked).
struct ModelRecords {
  gguf::File model;
  RecordMap records;
  bool from_store = false;
};
Result<ModelRecords> open_model_records(const std::string& path);

}  // namespace df::store
