#include "diskformer/store/store.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include "diskformer/gguf/split.h"
#include "store/files.h"
#include "store/manifest.h"

namespace df::store {

using nlohmann::json;

std::string header_file(uint32_t part) {
  if (part == 0) return kHeaderFile;
  char name[32];
  std::snprintf(name, sizeof name, "header-%05u.gguf", part + 1);
  return name;
}

bool Store::looks_like_store(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) &&
         (std::filesystem::exists(std::filesystem::path(path) / kManifestFile, ec) ||
          std::filesystem::exists(std::filesystem::path(path) / kProgressFile, ec));
}

Result<Store> Store::open(const std::string& dir, const StoreOptions& options) {
  namespace fs = std::filesystem;
  const std::string manifest_path = (fs::path(dir) / kManifestFile).string();
  DF_TRY(detail::refuse_links(dir));
  bool missing = false;
  auto text = detail::read_whole_file(manifest_path, &missing);
  if (!text.ok()) {
    std::error_code ec;
    if (missing && fs::exists(fs::path(dir) / kProgressFile, ec))
      return Error{dir + ": the store is incomplete (an ingest was interrupted); run diskformer ingest again to " +
                   "finish it"};
    if (missing) return Error{dir + ": not a store: " + kManifestFile + " is missing"};
    return text.take_error();
  }
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Error{manifest_path + ": not valid JSON"};
  DF_ASSIGN(detail::StoreHeader h, detail::parse_store_header(j, manifest_path, detail::kManifestFormat));
  if (h.layout_version != kLayoutVersion)
    return Error{manifest_path + ": layout_version " + std::to_string(h.layout_version) + ", this build reads " +
                 std::to_string(kLayoutVersion) + "; run diskformer ingest again to rebuild the store"};
  if (h.planes != kPlanesNone)
    return Error{manifest_path + ": planes \"" + h.planes + "\" is not a layout this build reads (\"" + kPlanesNone +
                 "\")"};

  // Each part's header as the manifest describes it; a split source's parts joined as when it was read.
  std::vector<gguf::File> parts;
  for (uint32_t k = 0; k < h.sources.size(); ++k) {
    const Fingerprint& fp = h.sources[k];
    const std::string header_path = (fs::path(dir) / header_file(k)).string();
    DF_ASSIGN(std::string header, detail::read_whole_file(header_path));
    if (header.size() != fp.header_bytes)
      return Error{header_path + ": " + std::to_string(header.size()) + " bytes, the manifest says " +
                   std::to_string(fp.header_bytes)};
    if (hash_text(fnv1a64(header.data(), header.size())) != fp.header_hash)
      return Error{header_path + ": contents do not match the manifest's header_hash " + fp.header_hash};
    auto bytes = header_source(std::move(header), fp.size);
    DF_ASSIGN(gguf::File part, gguf::parse(*bytes, header_path));
    parts.push_back(std::move(part));
  }
  gguf::File model;
  if (parts.size() == 1) {
    DF_ASSIGN(const std::optional<gguf::SplitKeys> keys, gguf::split_keys(parts[0]));
    if (keys)
      return Error{manifest_path + ": the source is part " + std::to_string(keys->no + 1) + " of " +
                   std::to_string(keys->count) + " of a split model, but the manifest lists no other part"};
    model = std::move(parts[0]);
  } else {
    DF_ASSIGN(model, gguf::join_split(std::move(parts)));
  }

  const std::string data_path = (fs::path(dir) / kDataFile).string();
  DF_ASSIGN(RecordMap map, RecordMap::repacked(model, data_path));
  auto records = j.find("records");
  if (records == j.end() || *records != detail::records_json(map))
    return Error{manifest_path + ": the record table does not match layout version " + std::to_string(kLayoutVersion) +
                 " of the model in " + kHeaderFile + "; run diskformer ingest again to rebuild the store"};
  if (h.data_bytes != map.file_bytes())
    return Error{manifest_path + ": data_bytes " + std::to_string(h.data_bytes) + ", the layout needs " +
                 std::to_string(map.file_bytes())};
  struct stat st {};
  if (::lstat(data_path.c_str(), &st) != 0)
    return Error{data_path + ": cannot open: " + detail::errno_text(errno)};
  if (static_cast<uint64_t>(st.st_size) != map.file_bytes())
    return Error{data_path + ": " + std::to_string(st.st_size) + " bytes, the manifest says " +
                 std::to_string(map.file_bytes())};

  if (!options.source.empty()) {
    DF_ASSIGN(ModelSource now, open_model_source(options.source, options.http));
    std::string change = describe_changes(h.sources, now.fingerprints);
    if (!change.empty())
      return Error{dir + ": the source " + redact_url(options.source) + " changed since the store was made (" + change +
                   "); run diskformer ingest again to rebuild it"};
  }

  Store s;
  s.dir_ = dir;
  s.model_ = std::move(model);
  s.records_ = std::move(map);
  s.sources_ = std::move(h.sources);
  s.layout_version_ = h.layout_version;
  return s;
}

Result<ModelRecords> open_model_records(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    DF_ASSIGN(Store s, Store::open(path));
    return ModelRecords{s.model(), s.records(), true};
  }
  DF_ASSIGN(gguf::File f, gguf::read_model(path));
  DF_ASSIGN(RecordMap map, RecordMap::in_place(f));
  return ModelRecords{std::move(f), std::move(map), false};
}

}  // namespace df::store
