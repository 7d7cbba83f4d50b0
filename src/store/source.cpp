#include "diskformer/store/source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "diskformer/gguf/split.h"
#include "diskformer/io/reader.h"
#include "store/http_source.h"
#include "store/url.h"

namespace df::store {

namespace {

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

// A local file through io::Reader (O_DIRECT where the filesystem allows it: ingest reads each byte once, so the
// page cache would only push out what the machine is using).
class LocalSource final : public Source {
 public:
  static Result<std::unique_ptr<Source>> open(const std::string& path) {
    std::error_code ec;
    std::string abs = std::filesystem::absolute(path, ec).lexically_normal().string();
    if (ec) abs = path;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return Error{path + ": cannot open: " + std::strerror(errno)};
    if (!S_ISREG(st.st_mode)) return Error{path + ": not a regular file"};
    io::ReaderOptions ro;
    ro.queue_depth = 8;
    DF_ASSIGN(auto reader, io::Reader::create(ro));
    DF_ASSIGN(io::FileId id, reader->open(path));
    auto src = std::unique_ptr<LocalSource>(new LocalSource(std::move(reader), id));
    src->fp_.location = abs;
    src->fp_.size = src->reader_->file(id).size;
    src->fp_.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    return std::unique_ptr<Source>(std::move(src));
  }

  const Fingerprint& fingerprint() const override { return fp_; }
  Status read(uint64_t offset, void* dst, size_t n) override { return reader_->read(id_, offset, n, dst); }
  bool still_same() override {
    struct stat st {};
    if (::stat(reader_->file(id_).path.c_str(), &st) != 0) return false;
    return static_cast<uint64_t>(st.st_size) == fp_.size &&
           int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec == fp_.mtime_ns;
  }

 private:
  LocalSource(std::unique_ptr<io::Reader> r, io::FileId id) : reader_(std::move(r)), id_(id) {}
  std::unique_ptr<io::Reader> reader_;
  io::FileId id_;
  Fingerprint fp_;
};

// The parser reads its windows front to back: keeping them gives the header's bytes without reading them twice
// (over HTTP, the header of a large vocabulary is megabytes).
class SourceBytes final : public gguf::ByteSource {
 public:
  explicit SourceBytes(Source& s) : s_(s) {}
  uint64_t size() const override { return s_.size(); }
  Status read_at(uint64_t offset, void* dst, size_t n) override {
    DF_TRY(s_.read(offset, dst, n));
    if (offset <= prefix_.size() && offset + n > prefix_.size()) {
      size_t skip = static_cast<size_t>(prefix_.size() - offset);
      prefix_.append(static_cast<const char*>(dst) + skip, n - skip);
    }
    return {};
  }
  std::string& prefix() { return prefix_; }  // bytes [0, prefix().size()) of the source

 private:
  Source& s_;
  std::string prefix_;
};

class HeaderBytes final : public gguf::ByteSource {
 public:
  HeaderBytes(std::string bytes, uint64_t size) : bytes_(std::move(bytes)), size_(size) {}
  uint64_t size() const override { return size_; }
  // The parser reads ahead in windows that may run past the header into tensor data it never looks at: those
  // bytes read as zeros. Past the file's size is the caller's error, as with any ByteSource.
  Status read_at(uint64_t offset, void* dst, size_t n) override {
    if (offset + n > size_)
      return Error{"read of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                   " goes past the end (" + std::to_string(size_) + " bytes)"};
    auto* out = static_cast<uint8_t*>(dst);
    size_t have = offset < bytes_.size() ? std::min<size_t>(n, bytes_.size() - static_cast<size_t>(offset)) : 0;
    if (have) std::memcpy(out, bytes_.data() + offset, have);
    std::memset(out + have, 0, n - have);
    return {};
  }

 private:
  std::string bytes_;
  uint64_t size_;
};

}  // namespace

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hash_text(uint64_t h) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool is_url(std::string_view s) { return s.starts_with("http://") || s.starts_with("https://"); }

// The same file whoever asks for it: credentials (redacted or not, in the URL or not) do not make another source.
bool same_location(const Fingerprint& a, const Fingerprint& b) {
  return detail::split_credentials(a.location).url == detail::split_credentials(b.location).url;
}

std::string describe_change(const Fingerprint& was, const Fingerprint& now) {
  std::string out;
  auto add = [&](const std::string& what) { out += (out.empty() ? "" : ", ") + what; };
  if (was.size != now.size) add("size " + std::to_string(was.size) + " -> " + std::to_string(now.size));
  if (was.mtime_ns != now.mtime_ns)
    add("mtime " + std::to_string(was.mtime_ns) + " ns -> " + std::to_string(now.mtime_ns) + " ns");
  if (was.etag != now.etag) add("ETag " + quoted(was.etag) + " -> " + quoted(now.etag));
  if (was.last_modified != now.last_modified)
    add("Last-Modified " + quoted(was.last_modified) + " -> " + quoted(now.last_modified));
  if (was.header_bytes != now.header_bytes)
    add("header size " + std::to_string(was.header_bytes) + " -> " + std::to_string(now.header_bytes));
  if (was.header_hash != now.header_hash) add("header hash " + was.header_hash + " -> " + now.header_hash);
  return out;
}

Result<std::unique_ptr<Source>> open_source(const std::string& path_or_url, const HttpOptions& http) {
  if (is_url(path_or_url)) return open_http_source(path_or_url, http);
  return LocalSource::open(path_or_url);
}

Result<gguf::File> read_header(Source& src, Fingerprint& fp, std::string& header) {
  fp = src.fingerprint();
  SourceBytes bytes(src);
  DF_ASSIGN(gguf::File f, gguf::parse(bytes, src.location()));
  if (bytes.prefix().size() >= f.data_offset) {
    header = std::move(bytes.prefix());
    header.resize(static_cast<size_t>(f.data_offset));
  } else {
    header.resize(static_cast<size_t>(f.data_offset));
    DF_TRY(src.read(0, header.data(), header.size()));
  }
  fp.header_bytes = f.data_offset;
  fp.header_hash = hash_text(fnv1a64(header.data(), header.size()));
  return f;
}

Result<ModelSource> open_model_source(const std::string& path_or_url, const HttpOptions& http, bool* changed) {
  ModelSource m;
  DF_ASSIGN(auto first, open_source(path_or_url, http));
  Fingerprint fp;
  std::string header;
  auto header_of = [&](Source& src) -> Result<gguf::File> {
    auto f = read_header(src, fp, header);
    if (!f.ok() && changed) *changed = src.changed();
    return f;
  };
  DF_ASSIGN(gguf::File f, header_of(*first));
  DF_ASSIGN(const std::optional<gguf::SplitKeys> keys, gguf::split_keys(f));
  m.parts.push_back(std::move(first));
  m.fingerprints.push_back(std::move(fp));
  m.headers.push_back(std::move(header));
  if (!keys) {
    m.model = std::move(f);
    return m;
  }
  const std::string shown = m.fingerprints[0].location;
  if (keys->no != 0)
    return Error{shown + ": part " + std::to_string(keys->no + 1) + " of " + std::to_string(keys->count) +
                 " of a split model (split.no = " + std::to_string(keys->no) + "); give its first part"};
  // The parts' locations come from the one given (credentials included), their names in messages from the shown one.
  DF_ASSIGN(const std::vector<std::string> locations, gguf::split_paths(path_or_url, 0, keys->count));
  std::vector<gguf::File> files;
  files.push_back(std::move(f));
  for (uint32_t k = 1; k < keys->count; ++k) {
    auto src = open_source(locations[k], http);
    if (!src.ok())
      return Error{shown + ": part " + std::to_string(k + 1) + " of " + std::to_string(keys->count) +
                   " of the split model: " + src.error().message};
    DF_ASSIGN(gguf::File part, header_of(**src));
    files.push_back(std::move(part));
    m.parts.push_back(std::move(src).value());
    m.fingerprints.push_back(fp);
    m.headers.push_back(std::move(header));
  }
  DF_ASSIGN(m.model, gguf::join_split(std::move(files)));
  return m;
}

std::string describe_changes(const std::vector<Fingerprint>& was, const std::vector<Fingerprint>& now) {
  if (was.size() != now.size())
    return "parts " + std::to_string(was.size()) + " -> " + std::to_string(now.size());
  std::string out;
  for (size_t k = 0; k < was.size(); ++k) {
    std::string c = describe_change(was[k], now[k]);
    if (c.empty()) continue;
    if (was.size() > 1) c = "part " + std::to_string(k + 1) + ": " + c;
    out += (out.empty() ? "" : "; ") + c;
  }
  return out;
}

std::unique_ptr<gguf::ByteSource> header_source(std::string bytes, uint64_t size) {
  return std::make_unique<HeaderBytes>(std::move(bytes), size);
}

}  // namespace df::store
