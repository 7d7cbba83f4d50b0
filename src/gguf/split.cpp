#include "diskformer/gguf/split.h"

#include <cstdio>
#include <map>

namespace df::gguf {

namespace {

std::string part_text(uint32_t no, uint32_t count) {
  return "part " + std::to_string(no + 1) + " of " + std::to_string(count);
}

Result<uint64_t> integer_key(const File& f, const char* key) {
  const Value* v = f.find(key);
  auto u = v ? v->to_u64() : std::nullopt;
  if (!u) return f.get_u64(key).take_error();  // the error names the file, the key and its type
  return *u;
}

}  // namespace

Result<std::optional<SplitKeys>> split_keys(const File& f) {
  if (!f.find(kSplitCount)) return std::optional<SplitKeys>{};
  DF_ASSIGN(const uint64_t count, integer_key(f, kSplitCount));
  if (count == 0 || count > 99999)
    return Error{f.path + ": metadata key '" + kSplitCount + "' is " + std::to_string(count) +
                 ", not a number of parts (1 to 99999)"};
  if (count == 1) return std::optional<SplitKeys>{};
  if (!f.find(kSplitNo))
    return Error{f.path + ": metadata key '" + kSplitNo + "' is missing (the file says " + kSplitCount + " = " +
                 std::to_string(count) + ")"};
  DF_ASSIGN(const uint64_t no, integer_key(f, kSplitNo));
  if (no >= count)
    return Error{f.path + ": metadata key '" + kSplitNo + "' is " + std::to_string(no) + ", past the " +
                 std::to_string(count) + " parts of " + kSplitCount};
  SplitKeys k;
  k.no = static_cast<uint32_t>(no);
  k.count = static_cast<uint32_t>(count);
  if (f.find(kSplitTensorsCount)) {
    const Value* v = f.find(kSplitTensorsCount);
    auto n = v->to_u64();
    if (!n)
      return Error{f.path + ": metadata key '" + kSplitTensorsCount + "': expected a non-negative integer, found " +
                   v->summary()};
    k.tensors = *n;
  }
  return std::optional<SplitKeys>{k};
}

std::string split_path(const std::string& prefix, uint32_t no, uint32_t count) {
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, "-%05u-of-%05u.gguf", no + 1, count);
  return prefix + suffix;
}

Result<std::vector<std::string>> split_paths(const std::string& path, uint32_t no, uint32_t count) {
  const std::string suffix = split_path("", no, count);
  if (path.size() <= suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
    return Error{path + ": " + part_text(no, count) + " of a split model (" + kSplitNo + " = " + std::to_string(no) +
                 ", " + kSplitCount + " = " + std::to_string(count) + "), but not named PREFIX" + suffix +
                 ", so its other parts cannot be found"};
  const std::string prefix = path.substr(0, path.size() - suffix.size());
  std::vector<std::string> out;
  for (uint32_t k = 0; k < count; ++k) out.push_back(split_path(prefix, k, count));
  return out;
}

Result<File> join_split(std::vector<File> parts) {
  if (parts.empty()) return Error{"a split model needs at least one part"};
  const auto n = static_cast<uint32_t>(parts.size());
  const std::string& first = parts[0].path;
  std::optional<uint64_t> declared;
  for (uint32_t k = 0; k < n; ++k) {
    const File& p = parts[k];
    DF_ASSIGN(const std::optional<SplitKeys> keys, split_keys(p));
    if (!keys)
      return Error{p.path + ": metadata key '" + kSplitCount + "' is " +
                   (p.find(kSplitCount) ? std::string("1") : std::string("missing")) + ", but the file is " +
                   part_text(k, n) + " of the split model " + first};
    if (keys->count != n)
      return Error{p.path + ": metadata key '" + kSplitCount + "' is " + std::to_string(keys->count) + ", " + first +
                   " says " + std::to_string(n)};
    if (keys->no != k)
      return Error{p.path + ": metadata key '" + kSplitNo + "' is " + std::to_string(keys->no) + ", expected " +
                   std::to_string(k) + " for " + part_text(k, n) + " of " + first};
    if (k == 0) declared = keys->tensors;
  }
  if (!declared)
    return Error{first + ": metadata key '" + std::string(kSplitTensorsCount) + "' is missing (the first part of a " +
                 "split model says how many tensors its parts hold)"};

  File out;
  out.path = parts[0].path;
  out.version = parts[0].version;
  out.alignment = parts[0].alignment;
  out.data_offset = parts[0].data_offset;
  out.metadata = std::move(parts[0].metadata);
  std::map<std::string, uint32_t, std::less<>> seen;  // tensor name -> part
  for (uint32_t k = 0; k < n; ++k) {
    File& p = parts[k];
    out.parts.push_back({p.path, p.file_size, p.data_offset, p.tensors.size()});
    out.file_size += p.file_size;
    for (TensorInfo& t : p.tensors) {
      auto [it, fresh] = seen.emplace(t.name, k);
      if (!fresh)
        return Error{p.path + ": tensor " + t.name + " (info at offset " + std::to_string(t.info_offset) +
                     ") is also in " + part_text(it->second, n) + ", " + parts[it->second].path};
      t.part = k;
      out.tensors.push_back(std::move(t));
    }
  }
  if (out.tensors.size() != *declared)
    return Error{first + ": metadata key '" + std::string(kSplitTensorsCount) + "' is " + std::to_string(*declared) +
                 ", but the " + std::to_string(n) + " parts hold " + std::to_string(out.tensors.size()) + " tensors"};
  out.reindex();
  return out;
}

Result<File> read_model(const std::string& path, const ParseLimits& limits) {
  DF_ASSIGN(File first, read_file(path, limits));
  DF_ASSIGN(const std::optional<SplitKeys> keys, split_keys(first));
  if (!keys) return first;
  if (keys->no != 0) {
    auto paths = split_paths(path, keys->no, keys->count);
    return Error{path + ": " + part_text(keys->no, keys->count) + " of a split model (" + kSplitNo + " = " +
                 std::to_string(keys->no) + "); open its first part" +
                 (paths.ok() ? ", " + (*paths)[0] : std::string(", the one whose split.no is 0"))};
  }
  DF_ASSIGN(const std::vector<std::string> paths, split_paths(path, 0, keys->count));
  std::vector<File> parts;
  parts.push_back(std::move(first));
  for (uint32_t k = 1; k < keys->count; ++k) {
    auto p = read_file(paths[k], limits);
    if (!p.ok())
      return Error{path + ": " + part_text(k, keys->count) + " of the split model: " + p.error().message};
    parts.push_back(std::move(p).value());
  }
  return join_split(std::move(parts));
}

}  // namespace df::gguf
