#include "store/manifest.h"

#include "diskformer/store/store.h"

namespace df::store::detail {

using nlohmann::json;

json fingerprint_json(const Fingerprint& fp) {
  return json{{"location", fp.location},         {"size", fp.size},
              {"mtime_ns", fp.mtime_ns},         {"etag", fp.etag},
              {"last_modified", fp.last_modified}, {"header_bytes", fp.header_bytes},
              {"header_hash", fp.header_hash}};
}

namespace {

template <typename T>
Status field(const json& j, const char* key, T& out, const std::string& name, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return Error{name + ": field " + where + key + " is missing"};
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    return Error{name + ": field " + where + key + " has the wrong type (" + it->type_name() + ")"};
  }
  return {};
}

json range_json(const std::string& name, ByteRange r) {
  return json{{"tensor", name}, {"offset", r.offset}, {"bytes", r.length}};
}

}  // namespace

Result<Fingerprint> fingerprint_from_json(const json& j, const std::string& name, const std::string& where) {
  if (!j.is_object()) return Error{name + ": field " + where.substr(0, where.size() - 1) + " is not an object"};
  Fingerprint fp;
  DF_TRY(field(j, "location", fp.location, name, where));
  DF_TRY(field(j, "size", fp.size, name, where));
  DF_TRY(field(j, "mtime_ns", fp.mtime_ns, name, where));
  DF_TRY(field(j, "etag", fp.etag, name, where));
  DF_TRY(field(j, "last_modified", fp.last_modified, name, where));
  DF_TRY(field(j, "header_bytes", fp.header_bytes, name, where));
  DF_TRY(field(j, "header_hash", fp.header_hash, name, where));
  return fp;
}

json records_json(const RecordMap& map) {
  json globals = json::array(), layers = json::array(), experts = json::array(), tables = json::array();
  for (const auto& [name, r] : map.globals()) globals.push_back(range_json(name, r));
  for (const auto& lr : map.layers()) {
    json tensors = json::array();
    for (const auto& t : lr.tensors) tensors.push_back({{"tensor", t.name}, {"slot_offset", t.slot_offset}, {"bytes", t.bytes}});
    layers.push_back({{"layer", lr.layer}, {"offset", lr.base}, {"bytes", lr.record_bytes}, {"tensors", tensors}});
  }
  for (const auto& el : map.expert_layers()) {
    json parts = json::array();
    for (const auto& p : el.parts) parts.push_back({{"tensor", p.name}, {"slot_offset", p.slot_offset}, {"bytes", p.bytes}});
    experts.push_back({{"layer", el.layer},
                       {"experts", el.n_experts},
                       {"offset", el.base},
                       {"stride", el.stride},
                       {"record_bytes", el.record_bytes},
                       {"parts", parts}});
  }
  for (const auto& t : map.tables())
    tables.push_back({{"tensor", t.tensor}, {"offset", t.base}, {"rows", t.rows}, {"row_bytes", t.row_bytes}});
  return json{{"alignment", kRecordAlignment},
              {"layer_tensor_alignment", kLayerTensorAlignment},
              {"globals", globals},
              {"layers", layers},
              {"expert_layers", experts},
              {"tables", tables}};
}

void put_sources(json& j, const std::vector<Fingerprint>& sources) {
  j["source"] = fingerprint_json(sources.at(0));
  if (sources.size() < 2) return;
  json parts = json::array();
  for (size_t k = 1; k < sources.size(); ++k) parts.push_back(fingerprint_json(sources[k]));
  j["split_parts"] = parts;
}

std::string manifest_text(const std::vector<Fingerprint>& sources, const RecordMap& map) {
  json j{{"format", kManifestFormat},
         {"layout_version", kLayoutVersion},
         {"planes", kPlanesNone},
         {"header_file", kHeaderFile},
         {"data_file", kDataFile},
         {"data_bytes", map.file_bytes()},
         {"records", records_json(map)}};
  put_sources(j, sources);
  return j.dump(1) + "\n";
}

Result<StoreHeader> parse_store_header(const json& j, const std::string& name, const char* format) {
  if (!j.is_object()) return Error{name + ": not a JSON object"};
  std::string fmt;
  DF_TRY(field(j, "format", fmt, name, ""));
  if (fmt != format) return Error{name + ": field format is \"" + fmt + "\", expected \"" + format + "\""};
  StoreHeader h;
  DF_TRY(field(j, "layout_version", h.layout_version, name, ""));
  DF_TRY(field(j, "planes", h.planes, name, ""));
  DF_TRY(field(j, "data_bytes", h.data_bytes, name, ""));
  auto src = j.find("source");
  if (src == j.end()) return Error{name + ": field source is missing"};
  DF_ASSIGN(Fingerprint first, fingerprint_from_json(*src, name));
  h.sources.push_back(std::move(first));
  if (auto parts = j.find("split_parts"); parts != j.end()) {
    if (!parts->is_array()) return Error{name + ": field split_parts is not an array"};
    for (const json& p : *parts) {
      const std::string where = "split_parts[" + std::to_string(h.sources.size() - 1) + "].";
      DF_ASSIGN(Fingerprint fp, fingerprint_from_json(p, name, where));
      h.sources.push_back(std::move(fp));
    }
  }
  return h;
}

}  // namespace df::store::detail
