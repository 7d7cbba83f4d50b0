// The JSON of manifest.json and ingest.progress.json, shared by ingest (writes) and Store (reads).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "diskformer/store/record.h"
#include "diskformer/store/source.h"

namespace df::store::detail {

nlohmann::json fingerprint_json(const Fingerprint& fp);
// `name` (a file) is used in errors naming the field that is missing or mistyped.
// `where` prefixes the field names ("source.", "split_parts[0].").
Result<Fingerprint> fingerprint_from_json(const nlohmann::json& j, const std::string& name,
                                          const std::string& where = "source.");

// The record table of a repacked map: what manifest.json's "records" holds.
nlohmann::json records_json(const RecordMap& map);

// "source" (the GGUF, or a split model's first part) and, for a split model, "split_parts" (the others in order).
void put_sources(nlohmann::json& j, const std::vector<Fingerprint>& sources);

std::string manifest_text(const std::vector<Fingerprint>& sources, const RecordMap& map);

// The fields both manifest.json and ingest.progress.json start with; the error names the file and the field.
struct StoreHeader {
  uint32_t layout_version = 0;
  std::string planes;
  std::vector<Fingerprint> sources;  // every part of the source: one for a GGUF of its own
  uint64_t data_bytes = 0;
};
Result<StoreHeader> parse_store_header(const nlohmann::json& j, const std::string& name, const char* format);

constexpr const char* kManifestFormat = "diskformer-store";
constexpr const char* kProgressFormat = "diskformer-ingest-progress";

}  // namespace df::store::detail
