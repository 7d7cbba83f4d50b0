#include "diskformer/gguf/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "diskformer/gguf/reader.h"
#include "diskformer/util/check.h"

namespace df::gguf {

namespace {

constexpr size_t kBufferBytes = 8 << 20;

void put_raw(std::vector<uint8_t>& out, const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
template <typename T>
void put_scalar(std::vector<uint8_t>& out, T v) {
  put_raw(out, &v, sizeof v);
}
void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put_scalar<uint64_t>(out, s.size());
  put_raw(out, s.data(), s.size());
}

void put_value(std::vector<uint8_t>& out, const Value& v) {
  switch (v.type) {
    case ValueType::U8: put_scalar<uint8_t>(out, static_cast<uint8_t>(std::get<uint64_t>(v.data))); break;
    case ValueType::I8: put_scalar<int8_t>(out, static_cast<int8_t>(std::get<int64_t>(v.data))); break;
    case ValueType::U16: put_scalar<uint16_t>(out, static_cast<uint16_t>(std::get<uint64_t>(v.data))); break;
    case ValueType::I16: put_scalar<int16_t>(out, static_cast<int16_t>(std::get<int64_t>(v.data))); break;
    case ValueType::U32: put_scalar<uint32_t>(out, static_cast<uint32_t>(std::get<uint64_t>(v.data))); break;
    case ValueType::I32: put_scalar<int32_t>(out, static_cast<int32_t>(std::get<int64_t>(v.data))); break;
    case ValueType::U64: put_scalar<uint64_t>(out, std::get<uint64_t>(v.data)); break;
    case ValueType::I64: put_scalar<int64_t>(out, std::get<int64_t>(v.data)); break;
    case ValueType::F32: put_scalar<float>(out, static_cast<float>(std::get<double>(v.data))); break;
    case ValueType::F64: put_scalar<double>(out, std::get<double>(v.data)); break;
    case ValueType::BOOL: put_scalar<uint8_t>(out, std::get<bool>(v.data) ? 1 : 0); break;
    case ValueType::STRING: put_string(out, std::get<std::string>(v.data)); break;
    case ValueType::ARRAY: {
      const Array& a = std::get<Array>(v.data);
      put_scalar<uint32_t>(out, static_cast<uint32_t>(a.elem_type));
      put_scalar<uint64_t>(out, a.items.size());
      for (const auto& item : a.items) {
        DF_CHECK_MSG(item.type == a.elem_type, "array element of the wrong type");
        put_value(out, item);
      }
      break;
    }
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

Result<Writer> Writer::create(const std::string& path, WriterOptions options) {
  if (options.alignment == 0 || (options.alignment & (options.alignment - 1)) != 0)
    return Error{path + ": alignment " + std::to_string(options.alignment) + " is not a power of two"};
  if (options.version != 2 && options.version != 3)
    return Error{path + ": cannot write GGUF version " + std::to_string(options.version)};
  Writer w;
  w.path_ = path;
  w.partial_path_ = path + ".partial";
  w.options_ = options;
  w.fd_ = ::open(w.partial_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return Error{w.partial_path_ + ": cannot create: " + std::strerror(errno)};
  if (options.alignment != kDefaultAlignment) w.set("general.alignment", Value::u32(options.alignment));
  return w;
}

Writer::Writer(Writer&& o) noexcept { *this = std::move(o); }

Writer& Writer::operator=(Writer&& o) noexcept {
  if (this == &o) return *this;
  path_ = std::move(o.path_);
  partial_path_ = std::move(o.partial_path_);
  options_ = o.options_;
  fd_ = o.fd_;
  o.fd_ = -1;
  metadata_ = std::move(o.metadata_);
  tensors_ = std::move(o.tensors_);
  header_written_ = o.header_written_;
  finished_ = o.finished_;
  o.finished_ = true;  // the moved-from writer must not remove the file
  current_ = o.current_;
  current_filled_ = o.current_filled_;
  written_ = o.written_;
  buffer_ = std::move(o.buffer_);
  return *this;
}

Writer::~Writer() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_ && !partial_path_.empty()) ::unlink(partial_path_.c_str());
}

void Writer::set(const std::string& key, Value value) {
  DF_CHECK_MSG(!header_written_, "metadata set after the header was written");
  for (auto& [k, v] : metadata_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  metadata_.emplace_back(key, std::move(value));
}

Status Writer::add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> shape) {
  DF_CHECK_MSG(!header_written_, "tensor added after the header was written");
  const TypeInfo* info = type_info(type);
  auto fail = [&](const std::string& why) { return Error{path_ + ": tensor '" + name + "': " + why}; };
  if (!info) return fail("unknown type");
  if (name.empty()) return fail("empty name");
  if (shape.empty() || shape.size() > kMaxDims) return fail("needs 1 to 4 dimensions");
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d == 0) return fail("zero dimension");
    n *= d;
  }
  if (shape[0] % info->block_elems != 0)
    return fail("row length " + std::to_string(shape[0]) + " is not a multiple of the block size " +
                std::to_string(info->block_elems));
  for (const auto& t : tensors_)
    if (t.name == name) return fail("duplicate tensor name");
  uint64_t rel = tensors_.empty() ? 0 : align_up(tensors_.back().rel_offset + tensors_.back().n_bytes, options_.alignment);
  tensors_.push_back({name, type, std::move(shape), n / info->block_elems * info->block_bytes, rel});
  return {};
}

uint64_t Writer::total_data_bytes() const {
  return tensors_.empty() ? 0 : tensors_.back().rel_offset + tensors_.back().n_bytes;
}

Status Writer::put(const void* data, size_t n) {
  auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    size_t take = std::min(n, kBufferBytes - buffer_.size());
    buffer_.insert(buffer_.end(), p, p + take);
    p += take;
    n -= take;
    if (buffer_.size() == kBufferBytes) DF_TRY(flush_buffer());
  }
  return {};
}

Status Writer::flush_buffer() {
  const uint8_t* p = buffer_.data();
  size_t left = buffer_.size();
  while (left > 0) {
    ssize_t got = ::write(fd_, p, left);
    if (got < 0) {
      if (errno == EINTR) continue;
      return Error{partial_path_ + ": write failed at offset " + std::to_string(written_) + ": " +
                   std::strerror(errno)};
    }
    p += got;
    left -= static_cast<size_t>(got);
    written_ += static_cast<uint64_t>(got);
  }
  buffer_.clear();
  return {};
}

Status Writer::write_header() {
  DF_CHECK_MSG(!header_written_, "header written twice");
  buffer_.reserve(kBufferBytes);
  std::vector<uint8_t> h;
  put_scalar<uint32_t>(h, kMagic);
  put_scalar<uint32_t>(h, options_.version);
  put_scalar<uint64_t>(h, tensors_.size());
  put_scalar<uint64_t>(h, metadata_.size());
  for (const auto& [k, v] : metadata_) {
    put_string(h, k);
    put_scalar<uint32_t>(h, static_cast<uint32_t>(v.type));
    put_value(h, v);
  }
  for (const auto& t : tensors_) {
    put_string(h, t.name);
    put_scalar<uint32_t>(h, static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) put_scalar<uint64_t>(h, d);
    put_scalar<uint32_t>(h, static_cast<uint32_t>(t.type));
    put_scalar<uint64_t>(h, t.rel_offset);
  }
  h.resize(align_up(h.size(), options_.alignment), 0);
  header_written_ = true;
  return put(h.data(), h.size());
}

Status Writer::write_data(const void* data, size_t n) {
  DF_CHECK_MSG(header_written_, "tensor data written before the header");
  auto* p = static_cast<const uint8_t*>(data);
  static const uint8_t zeros[256] = {};
  while (n > 0) {
    if (current_ >= tensors_.size())
      return Error{path_ + ": " + std::to_string(n) + " bytes of tensor data beyond the last tensor"};
    const Pending& t = tensors_[current_];
    uint64_t take = std::min<uint64_t>(n, t.n_bytes - current_filled_);
    DF_TRY(put(p, static_cast<size_t>(take)));
    p += take;
    n -= static_cast<size_t>(take);
    current_filled_ += take;
    if (current_filled_ == t.n_bytes) {
      ++current_;
      current_filled_ = 0;
      if (current_ < tensors_.size()) {
        uint64_t pad = tensors_[current_].rel_offset - (t.rel_offset + t.n_bytes);
        while (pad > 0) {
          uint64_t z = std::min<uint64_t>(pad, sizeof zeros);
          DF_TRY(put(zeros, static_cast<size_t>(z)));
          pad -= z;
        }
      }
    }
  }
  return {};
}

Status Writer::finish() {
  DF_CHECK_MSG(!finished_, "finish called twice");
  if (!header_written_) DF_TRY(write_header());
  if (current_ < tensors_.size())
    return Error{path_ + ": tensor '" + tensors_[current_].name + "' got " + std::to_string(current_filled_) + " of " +
                 std::to_string(tensors_[current_].n_bytes) + " bytes"};
  DF_TRY(flush_buffer());
  if (::fsync(fd_) != 0) return Error{partial_path_ + ": fsync failed: " + std::strerror(errno)};
  if (::close(fd_) != 0) {
    fd_ = -1;
    return Error{partial_path_ + ": close failed: " + std::strerror(errno)};
  }
  fd_ = -1;
  if (::rename(partial_path_.c_str(), path_.c_str()) != 0)
    return Error{path_ + ": cannot rename from " + partial_path_ + ": " + std::strerror(errno)};
  finished_ = true;
  return {};
}

}  // namespace df::gguf
