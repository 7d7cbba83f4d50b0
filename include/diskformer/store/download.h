// One file fetched over http(s) into a local path, through the same Range reads as a URL source (source.h: retries
// with back-off, resumed transfers, logins, timeouts). The bytes go to PATH.partial, with PATH.partial.json saying
// what they are of (URL, size, ETag, Last-Modified); a download stopped anywhere (a dropped connection past the
// retries, a full disk, a kill) continues from the partial file's end when run again, provided the server's file
// is still the same. Only a whole file, of the size asked for and the sha256 asked for (where given), is renamed to
// PATH; a file whose sha256 differs is removed and refused.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "diskformer/store/source.h"
#include "diskformer/util/result.h"

namespace df::store {

struct DownloadProgress {
  std::string name;       // what is being fetched (the file's name)
  uint64_t done = 0;      // bytes in the partial file (resumed ones included)
  uint64_t total = 0;
  uint64_t this_run = 0;  // of which fetched by this run
  double seconds = 0;     // since this run started fetching
  bool finished = false;
};

struct DownloadOptions {
  HttpOptions http;
  std::string name;                 // for progress and messages; default: the URL's last path segment
  std::optional<uint64_t> size;     // the size the file must have (an API's listing)
  std::string sha256;               // lowercase hex the bytes must hash to; "" where unknown
  std::function<void(const DownloadProgress&)> on_progress;
  std::function<void(const std::string&)> on_note;  // resumed, started over
};

struct DownloadResult {
  uint64_t bytes = 0;
  uint64_t resumed_at = 0;  // bytes already in the partial file when this run started
  std::string sha256;       // of the whole file
  std::string etag;           // the server's, where it sent one
  std::string last_modified;  // likewise
};

// Errors name the URL (credentials redacted) or the local path, and the byte offset or the two hashes.
Result<DownloadResult> download(const std::string& url, const std::string& path, const DownloadOptions& options);

}  // namespace df::store
