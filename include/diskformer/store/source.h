// Where a model's bytes come from for `ingest`: a local file (read through io::Reader) or an http(s) URL (Range
// requests through libcurl, resumed after a dropped connection). Both say what they are through a Fingerprint, so
// that a store can tell whether it still matches its source.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/util/result.h"

namespace df::store {

// What identifies a source's contents without reading all of it.
struct Fingerprint {
  std::string location;       // absolute path or URL (its password shown as ***: see redact_url)
  uint64_t size = 0;
  int64_t mtime_ns = 0;       // local files; 0 for URLs
  std::string etag;           // URLs: the ETag header as sent ("" where the server sends none)
  std::string last_modified;  // URLs: the Last-Modified header ("" where none)
  uint64_t header_bytes = 0;  // the GGUF header: bytes [0, header_bytes), up to the tensor data
  std::string header_hash;    // "fnv1a64:<16 hex digits>" of those bytes
};

// "" where the contents are the same; otherwise what changed, e.g. `size 100 -> 200, ETag "a" -> "b"`.
// The location is not compared (see same_location).
std::string describe_change(const Fingerprint& was, const Fingerprint& now);
bool same_location(const Fingerprint& a, const Fingerprint& b);

bool is_url(std::string_view s);  // http:// or https://
// The URL with the password of its userinfo replaced: "http://user:***@host/m.gguf". Every location a store writes
// or prints is redacted; the credentials go to the server and nowhere else.
std::string redact_url(std::string_view url);

// 64-bit FNV-1a, continued from `h`: detects a changed header, not an adversary.
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);
std::string hash_text(uint64_t h);  // "fnv1a64:0123456789abcdef"

class Source {
 public:
  virtual ~Source() = default;
  // Size, mtime or ETag as seen when opened; the header fields are filled by read_header().
  virtual const Fingerprint& fingerprint() const = 0;
  uint64_t size() const { return fingerprint().size; }
  const std::string& location() const { return fingerprint().location; }
  // Reads exactly n bytes at offset (offset + n <= size()). Errors name the location, offset and length.
  virtual Status read(uint64_t offset, void* dst, size_t n) = 0;
  // True after a read failed because the source is no longer what was opened (size or ETag changed, 416).
  virtual bool changed() const { return false; }
  // Checks again, after reading, that the source is what was opened (a local file: size and mtime; a URL: every
  // response was checked against the ETag and size already).
  virtual bool still_same() { return !changed(); }
};

struct HttpOptions {
  unsigned max_retries = 8;         // consecutive failed attempts without a byte of progress
  unsigned retry_delay_ms = 100;    // first back-off; doubles up to 2 s
  long connect_timeout_s = 10;
  long stall_timeout_s = 30;        // a transfer that moves nothing for this long (or timeout_s / 3) counts as dropped
  // Gives up on a source from which no byte has come for this long, however many attempts that spans: a server
  // that sends its headers and then nothing fails after this, not after every retry's stall.
  double timeout_s = 120;
  // Basic-auth "USER:PASSWORD" for a URL that carries none (ingest reads it from DISKFORMER_HTTP_AUTH).
  std::string auth;
  // The netrc whose entry for the host gives the login where neither the URL nor `auth` does; "" is libcurl's
  // default, ~/.netrc.
  std::string netrc_file;
  // Request headers sent as they are ("Authorization: Bearer hf_..."); never shown in a message or stored.
  std::vector<std::string> headers;
  // One line per retry: what failed, and when it is asked again.
  std::function<void(const std::string&)> on_retry;
};

// A path or an http(s) URL. A URL is probed with a one-byte Range request (size, ETag, Last-Modified).
Result<std::unique_ptr<Source>> open_source(const std::string& path_or_url, const HttpOptions& http = {});

// Parses the GGUF header through the source and fills the header fields of `fp` (a copy of the source's
// fingerprint completed with the header's size and hash). `header` receives the header's bytes.
Result<gguf::File> read_header(Source& src, Fingerprint& fp, std::string& header);

// A model's sources: one GGUF, or every part of a split one (gguf/split.h), opened from the first (a path or a
// URL: the other parts' names are made from it). For each part its source, its fingerprint with the header fields
// filled, and its header's bytes; `model` joins the parts' headers (tensor offsets per part, each tensor's `part`).
struct ModelSource {
  std::vector<std::unique_ptr<Source>> parts;
  std::vector<Fingerprint> fingerprints;
  std::vector<std::string> headers;
  gguf::File model;
};
// `changed` (where given) is set when the error came from a part that changed while its header was read.
Result<ModelSource> open_model_source(const std::string& path_or_url, const HttpOptions& http = {},
                                      bool* changed = nullptr);

// "" where every part is as it was; otherwise what changed, part by part for a split model ("part 2: size 1 -> 2").
std::string describe_changes(const std::vector<Fingerprint>& was, const std::vector<Fingerprint>& now);

// A gguf::ByteSource over the first bytes of a file whose full size is `size`: parses a header saved apart from
// its data (a store's header.gguf). Bytes past the saved ones read as zeros (the parser's read-ahead window).
std::unique_ptr<gguf::ByteSource> header_source(std::string bytes, uint64_t size);

}  // namespace df::store
