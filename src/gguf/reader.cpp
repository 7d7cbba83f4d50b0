#include "diskformer/gguf/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_map>

namespace df::gguf {

namespace {

class FileSource final : public ByteSource {
 public:
  FileSource(int fd, uint64_t size, std::string path) : fd_(fd), size_(size), path_(std::move(path)) {}
  ~FileSource() override { ::close(fd_); }
  uint64_t size() const override { return size_; }
  Status read_at(uint64_t offset, void* dst, size_t n) override {
    auto* out = static_cast<uint8_t*>(dst);
    while (n > 0) {
      ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR) continue;
        return Error{path_ + ": read failed at offset " + std::to_string(offset) + ": " + std::strerror(errno)};
      }
      if (got == 0) return Error{path_ + ": file ended at offset " + std::to_string(offset) + " while reading"};
      out += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
    return {};
  }

 private:
  int fd_;
  uint64_t size_;
  std::string path_;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(const void* data, size_t n) : data_(static_cast<const uint8_t*>(data)), size_(n) {}
  uint64_t size() const override { return size_; }
  Status read_at(uint64_t offset, void* dst, size_t n) override {
    std::memcpy(dst, data_ + offset, n);
    return {};
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

// Sequential bounded reads through a window, with the position kept for error messages.
class Cursor {
 public:
  Cursor(ByteSource& src, const std::string& name) : src_(src), name_(name), size_(src.size()) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const std::string& name() const { return name_; }

  Error error_at(uint64_t offset, const std::string& field, const std::string& what) const {
    return Error{name_ + ": " + field + " at offset " + std::to_string(offset) + ": " + what};
  }

  Status read(void* dst, size_t n, const std::string& field) {
    if (n > left())
      return error_at(pos_, field,
                      "truncated: needs " + std::to_string(n) + " bytes, the file has " + std::to_string(left()) +
                          " left (size " + std::to_string(size_) + ")");
    auto* out = static_cast<uint8_t*>(dst);
    while (n > 0) {
      if (pos_ < win_start_ || pos_ >= win_start_ + win_len_) DF_TRY(fill());
      size_t off = static_cast<size_t>(pos_ - win_start_);
      size_t take = std::min(n, win_len_ - off);
      std::memcpy(out, window_.data() + off, take);
      out += take;
      pos_ += take;
      n -= take;
    }
    return {};
  }

  template <typename T>
  Result<T> scalar(const std::string& field) {
    T v{};
    DF_TRY(read(&v, sizeof v, field));
    return v;
  }

  Result<std::string> string(const std::string& field) {
    uint64_t at = pos_;
    DF_ASSIGN(uint64_t len, scalar<uint64_t>(field + " length"));
    if (len > left())
      return error_at(at, field,
                      "string length " + std::to_string(len) + " exceeds the " + std::to_string(left()) +
                          " bytes left in the file");
    std::string s(static_cast<size_t>(len), '\0');
    DF_TRY(read(s.data(), s.size(), field));
    return s;
  }

 private:
  Status fill() {
    constexpr size_t kWindow = 1 << 20;
    window_.resize(kWindow);
    win_start_ = pos_;
    win_len_ = static_cast<size_t>(std::min<uint64_t>(kWindow, size_ - pos_));
    return src_.read_at(win_start_, window_.data(), win_len_);
  }

  ByteSource& src_;
  const std::string& name_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::vector<uint8_t> window_;
  uint64_t win_start_ = 0;
  size_t win_len_ = 0;
};

// Smallest encoding of a value of each type: bounds element counts against the bytes left.
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: return 8;
    case ValueType::ARRAY: return 12;
  }
  return 1;
}

class Parser {
 public:
  Parser(ByteSource& src, const std::string& name, const ParseLimits& limits)
      : cur_(src, name), limits_(limits), name_(name) {}

  Result<File> run() {
    File f;
    f.path = name_;
    f.file_size = cur_.left();

    DF_ASSIGN(uint32_t magic, cur_.scalar<uint32_t>("magic"));
    if (magic != kMagic) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "0x%08x", magic);
      return cur_.error_at(0, "magic", std::string("wrong magic ") + hex + " (expected \"GGUF\"): not a GGUF file");
    }
    DF_ASSIGN(f.version, cur_.scalar<uint32_t>("version"));
    if (f.version != 2 && f.version != 3) {
      std::string why = "unsupported GGUF version " + std::to_string(f.version) + " (supported: 2 and 3)";
      if (f.version == 1) why += "; v1 files must be converted";
      if ((f.version & 0xffff) == 0 && f.version != 0) why += "; this looks like a big-endian GGUF, which is not supported";
      return cur_.error_at(4, "version", why);
    }
    uint64_t at = cur_.pos();
    DF_ASSIGN(uint64_t n_tensors, cur_.scalar<uint64_t>("tensor_count"));
    constexpr uint64_t kMinTensorInfo = 8 + 1 + 4 + 8 + 4 + 8;  // name len + 1 char, n_dims, one dim, type, offset
    if (n_tensors > cur_.left() / kMinTensorInfo)
      return cur_.error_at(at, "tensor_count",
                           "count " + std::to_string(n_tensors) + " cannot fit in the " + std::to_string(cur_.left()) +
                               " bytes left");
    at = cur_.pos();
    DF_ASSIGN(uint64_t n_kv, cur_.scalar<uint64_t>("metadata_kv_count"));
    constexpr uint64_t kMinKv = 8 + 1 + 4 + 1;
    if (n_kv > cur_.left() / kMinKv)
      return cur_.error_at(at, "metadata_kv_count",
                           "count " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(cur_.left()) +
                               " bytes left");

    f.metadata.reserve(static_cast<size_t>(n_kv));
    std::unordered_map<std::string, uint64_t> seen_keys;
    for (uint64_t i = 0; i < n_kv; ++i) {
      KeyValue kv;
      kv.offset = cur_.pos();
      std::string field = "metadata[" + std::to_string(i) + "]";
      DF_ASSIGN(kv.key, cur_.string(field + " key"));
      if (kv.key.empty()) return cur_.error_at(kv.offset, field + " key", "empty key");
      field = "metadata key '" + kv.key + "'";
      auto [it, fresh] = seen_keys.emplace(kv.key, kv.offset);
      if (!fresh)
        return cur_.error_at(kv.offset, field,
                             "duplicate key (first at offset " + std::to_string(it->second) + ")");
      uint64_t type_at = cur_.pos();
      DF_ASSIGN(uint32_t type, cur_.scalar<uint32_t>(field + " type"));
      if (type >= kValueTypeCount)
        return cur_.error_at(type_at, field + " type", "invalid value type " + std::to_string(type));
      DF_ASSIGN(kv.value, value(static_cast<ValueType>(type), field, 0));
      f.metadata.push_back(std::move(kv));
    }

    for (const auto& kv : f.metadata) {
      if (kv.key != "general.alignment") continue;
      auto a = kv.value.to_u64();
      if (kv.value.type != ValueType::U32 || !a || *a == 0 || (*a & (*a - 1)) != 0)
        return cur_.error_at(kv.offset, "metadata key 'general.alignment'",
                             "must be a u32 power of two, got " + std::string(value_type_name(kv.value.type)) + " " +
                                 kv.value.summary());
      f.alignment = static_cast<uint32_t>(*a);
    }

    f.tensors.reserve(static_cast<size_t>(n_tensors));
    std::unordered_map<std::string, uint64_t> seen_names;
    for (uint64_t i = 0; i < n_tensors; ++i) {
      TensorInfo t;
      t.info_offset = cur_.pos();
      std::string field = "tensor[" + std::to_string(i) + "]";
      DF_ASSIGN(t.name, cur_.string(field + " name"));
      if (t.name.empty()) return cur_.error_at(t.info_offset, field + " name", "empty tensor name");
      field = "tensor '" + t.name + "'";
      auto [it, fresh] = seen_names.emplace(t.name, t.info_offset);
      if (!fresh)
        return cur_.error_at(t.info_offset, field,
                             "duplicate tensor name (first at offset " + std::to_string(it->second) + ")");
      uint64_t dims_at = cur_.pos();
      DF_ASSIGN(uint32_t n_dims, cur_.scalar<uint32_t>(field + " n_dims"));
      if (n_dims == 0 || n_dims > kMaxDims)
        return cur_.error_at(dims_at, field + " n_dims",
                             "has " + std::to_string(n_dims) + " dimensions (1 to " + std::to_string(kMaxDims) +
                                 " allowed)");
      t.n_elements = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        uint64_t dim_at = cur_.pos();
        std::string dfield = field + " dims[" + std::to_string(d) + "]";
        DF_ASSIGN(uint64_t dim, cur_.scalar<uint64_t>(dfield));
        if (dim == 0) return cur_.error_at(dim_at, dfield, "zero dimension");
        if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / t.n_elements)
          return cur_.error_at(dim_at, dfield,
                               "dimension " + std::to_string(dim) + " makes the element count overflow");
        t.n_elements *= dim;
        t.shape.push_back(dim);
      }
      uint64_t type_at = cur_.pos();
      DF_ASSIGN(uint32_t type, cur_.scalar<uint32_t>(field + " type"));
      const TypeInfo* info = type_info(type);
      if (!info)
        return cur_.error_at(type_at, field + " type", "unknown or removed ggml type code " + std::to_string(type));
      t.type = static_cast<GgmlType>(type);
      if (t.shape[0] % info->block_elems != 0)
        return cur_.error_at(dims_at + 4, field + " dims[0]",
                             "row length " + std::to_string(t.shape[0]) + " is not a multiple of the " +
                                 std::string(info->name) + " block of " + std::to_string(info->block_elems));
      uint64_t blocks = t.n_elements / info->block_elems;
      if (blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes)
        return cur_.error_at(dims_at, field + " dims", "byte size overflows");
      t.n_bytes = blocks * info->block_bytes;
      uint64_t off_at = cur_.pos();
      DF_ASSIGN(uint64_t rel, cur_.scalar<uint64_t>(field + " offset"));
      if (rel % f.alignment != 0)
        return cur_.error_at(off_at, field + " offset",
                             "data offset " + std::to_string(rel) + " is not a multiple of the alignment " +
                                 std::to_string(f.alignment));
      t.offset = rel;  // made absolute below, once the data section's start is known
      f.tensors.push_back(std::move(t));
    }

    uint64_t header_end = cur_.pos();
    f.data_offset = (header_end + f.alignment - 1) / f.alignment * f.alignment;
    if (!f.tensors.empty() && f.data_offset > f.file_size)
      return cur_.error_at(header_end, "tensor data", "the file ends before the data section starts at offset " +
                                                          std::to_string(f.data_offset));
    uint64_t data_size = f.file_size >= f.data_offset ? f.file_size - f.data_offset : 0;
    for (auto& t : f.tensors) {
      if (t.offset > data_size || t.n_bytes > data_size - t.offset)
        return cur_.error_at(t.info_offset, "tensor '" + t.name + "' data",
                             "bytes [" + std::to_string(f.data_offset + t.offset) + ", +" +
                                 std::to_string(t.n_bytes) + ") run past the end of the file (size " +
                                 std::to_string(f.file_size) + ")");
      t.offset += f.data_offset;
    }
    std::vector<const TensorInfo*> by_offset;
    by_offset.reserve(f.tensors.size());
    for (const auto& t : f.tensors) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const TensorInfo* a = by_offset[i - 1];
      const TensorInfo* b = by_offset[i];
      if (a->offset + a->n_bytes > b->offset)
        return cur_.error_at(b->info_offset, "tensor '" + b->name + "' data",
                             "bytes at offset " + std::to_string(b->offset) + " overlap tensor '" + a->name +
                                 "' at [" + std::to_string(a->offset) + ", +" + std::to_string(a->n_bytes) + ")");
    }
    f.reindex();
    return f;
  }

 private:
  Result<Value> value(ValueType type, const std::string& field, uint32_t depth) {
    Value v;
    v.type = type;
    switch (type) {
      case ValueType::U8: { DF_ASSIGN(uint8_t x, cur_.scalar<uint8_t>(field)); v.data = uint64_t{x}; break; }
      case ValueType::I8: { DF_ASSIGN(int8_t x, cur_.scalar<int8_t>(field)); v.data = int64_t{x}; break; }
      case ValueType::U16: { DF_ASSIGN(uint16_t x, cur_.scalar<uint16_t>(field)); v.data = uint64_t{x}; break; }
      case ValueType::I16: { DF_ASSIGN(int16_t x, cur_.scalar<int16_t>(field)); v.data = int64_t{x}; break; }
      case ValueType::U32: { DF_ASSIGN(uint32_t x, cur_.scalar<uint32_t>(field)); v.data = uint64_t{x}; break; }
      case ValueType::I32: { DF_ASSIGN(int32_t x, cur_.scalar<int32_t>(field)); v.data = int64_t{x}; break; }
      case ValueType::U64: { DF_ASSIGN(uint64_t x, cur_.scalar<uint64_t>(field)); v.data = x; break; }
      case ValueType::I64: { DF_ASSIGN(int64_t x, cur_.scalar<int64_t>(field)); v.data = x; break; }
      case ValueType::F32: { DF_ASSIGN(float x, cur_.scalar<float>(field)); v.data = double{x}; break; }
      case ValueType::F64: { DF_ASSIGN(double x, cur_.scalar<double>(field)); v.data = x; break; }
      case ValueType::BOOL: {
        uint64_t at = cur_.pos();
        DF_ASSIGN(uint8_t x, cur_.scalar<uint8_t>(field));
        if (x > 1) return cur_.error_at(at, field, "invalid bool byte " + std::to_string(x));
        v.data = x == 1;
        break;
      }
      case ValueType::STRING: { DF_ASSIGN(std::string s, cur_.string(field)); v.data = std::move(s); break; }
      case ValueType::ARRAY: {
        uint64_t at = cur_.pos();
        if (depth >= limits_.max_array_depth)
          return cur_.error_at(at, field, "arrays nested deeper than " + std::to_string(limits_.max_array_depth));
        DF_ASSIGN(uint32_t elem, cur_.scalar<uint32_t>(field + " element type"));
        if (elem >= kValueTypeCount)
          return cur_.error_at(at, field + " element type", "invalid array element type " + std::to_string(elem));
        uint64_t count_at = cur_.pos();
        DF_ASSIGN(uint64_t n, cur_.scalar<uint64_t>(field + " count"));
        auto et = static_cast<ValueType>(elem);
        if (n > cur_.left() / min_encoded_size(et))
          return cur_.error_at(count_at, field + " count",
                               "array of " + std::to_string(n) + " " + std::string(value_type_name(et)) +
                                   " cannot fit in the " + std::to_string(cur_.left()) + " bytes left");
        Array a;
        a.elem_type = et;
        a.items.reserve(static_cast<size_t>(n));
        for (uint64_t i = 0; i < n; ++i) {
          Value item;
          if (et == ValueType::ARRAY) {
            // A nested array stores its own element type and count; the outer type only says "array".
            DF_ASSIGN(item, value(ValueType::ARRAY, field + "[" + std::to_string(i) + "]", depth + 1));
          } else {
            DF_ASSIGN(item, value(et, field + "[" + std::to_string(i) + "]", depth + 1));
          }
          a.items.push_back(std::move(item));
        }
        v.data = std::move(a);
        break;
      }
    }
    return v;
  }

  Cursor cur_;
  ParseLimits limits_;
  std::string name_;
};

}  // namespace

std::unique_ptr<ByteSource> memory_source(const void* data, size_t n) {
  return std::make_unique<MemorySource>(data, n);
}

Result<File> parse(ByteSource& src, const std::string& name, const ParseLimits& limits) {
  return Parser(src, name, limits).run();
}

Result<File> read_file(const std::string& path, const ParseLimits& limits) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{path + ": cannot open: " + std::strerror(errno)};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Error{path + ": cannot stat: " + std::strerror(e)};
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{path + ": not a regular file"};
  }
  FileSource src(fd, static_cast<uint64_t>(st.st_size), path);
  return parse(src, path, limits);
}

// ---- File lookups ----

void File::reindex() {
  kv_index_.clear();
  tensor_index_.clear();
  for (size_t i = 0; i < metadata.size(); ++i) kv_index_.emplace(metadata[i].key, i);
  for (size_t i = 0; i < tensors.size(); ++i) tensor_index_.emplace(tensors[i].name, i);
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &metadata[it->second].value;
}

const TensorInfo* File::tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors[it->second];
}

namespace {
Error missing(const File& f, std::string_view key) {
  return Error{f.path + ": metadata key '" + std::string(key) + "' is missing"};
}
Error wrong_type(const File& f, std::string_view key, const Value& v, const char* want) {
  auto it = std::find_if(f.metadata.begin(), f.metadata.end(), [&](const KeyValue& kv) { return kv.key == key; });
  std::string at = it == f.metadata.end() ? "" : " at offset " + std::to_string(it->offset);
  return Error{f.path + ": metadata key '" + std::string(key) + "'" + at + ": expected " + want + ", found " +
               std::string(value_type_name(v.type)) + " " + v.summary()};
}
}  // namespace

Result<uint64_t> File::get_u64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(*this, key);
  auto u = v->to_u64();
  if (!u) return wrong_type(*this, key, *v, "a non-negative integer");
  return *u;
}

Result<double> File::get_f64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(*this, key);
  auto d = v->to_f64();
  if (!d) return wrong_type(*this, key, *v, "a number");
  return *d;
}

Result<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(*this, key);
  if (!v->str()) return wrong_type(*this, key, *v, "a string");
  return *v->str();
}

Result<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(*this, key);
  auto b = v->to_bool();
  if (!b) return wrong_type(*this, key, *v, "a bool");
  return *b;
}

Result<const Array*> File::get_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(*this, key);
  if (!v->array()) return wrong_type(*this, key, *v, "an array");
  return v->array();
}

uint64_t File::get_u64_or(std::string_view key, uint64_t fallback) const {
  const Value* v = find(key);
  auto u = v ? v->to_u64() : std::nullopt;
  return u ? *u : fallback;
}

double File::get_f64_or(std::string_view key, double fallback) const {
  const Value* v = find(key);
  auto d = v ? v->to_f64() : std::nullopt;
  return d ? *d : fallback;
}

std::string File::get_string_or(std::string_view key, std::string fallback) const {
  const Value* v = find(key);
  return v && v->str() ? *v->str() : fallback;
}

std::string File::architecture() const { return get_string_or("general.architecture", ""); }

}  // namespace df::gguf
