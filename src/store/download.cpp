#include "diskformer/store/download.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>

#include "diskformer/io/buffer.h"
#include "diskformer/util/size.h"
#include "store/files.h"
#include "store/sha256.h"

namespace df::store {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Bytes per Range request: large enough that a request's round trip is small beside its transfer.
constexpr uint64_t kWindow = 16ull << 20;

std::string last_segment(const std::string& url) {
  std::string s = url.substr(0, url.find_first_of("?#"));
  const size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// What the partial file's bytes are of: a resumed download appends only to bytes of the same file.
json describe(const Fingerprint& fp) {
  return json{{"url", fp.location}, {"size", fp.size}, {"etag", fp.etag}, {"last_modified", fp.last_modified}};
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status write_all(int fd, const std::string& path, const uint8_t* data, uint64_t n, uint64_t at, uint64_t& done) {
  done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(fd, data + done, n - done, static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return Error{path + ": write of " + std::to_string(n - done) + " bytes at offset " + std::to_string(at + done) +
                   " failed: " + detail::errno_text(w < 0 ? errno : ENOSPC)};
    done += static_cast<uint64_t>(w);
  }
  return {};
}

}  // namespace

Result<DownloadResult> download(const std::string& url, const std::string& path, const DownloadOptions& o) {
  auto note = [&](const std::string& s) {
    if (o.on_note) o.on_note(s);
  };
  const std::string name = o.name.empty() ? last_segment(redact_url(url)) : o.name;
  DF_ASSIGN(auto src, open_source(url, o.http));
  const Fingerprint fp = src->fingerprint();
  if (o.size && *o.size != fp.size)
    return Error{fp.location + ": " + std::to_string(fp.size) + " bytes, the repository's listing says " +
                 std::to_string(*o.size)};

  const std::string partial = path + ".partial", meta_path = partial + ".json";
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Error{fs::path(path).parent_path().string() + ": cannot create the directory: " + ec.message()};
  Fd f;
  f.fd = ::open(partial.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (f.fd < 0) return Error{detail::open_error(partial, "open for writing", errno)};
  // One writer per file: a second download of it waits for nothing and says so.
  if (::flock(f.fd, LOCK_EX | LOCK_NB) != 0)
    return Error{partial + ": another download is writing this file"};
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return Error{partial + ": cannot stat: " + detail::errno_text(errno)};
  if (!S_ISREG(st.st_mode)) return Error{partial + ": not a regular file"};
  uint64_t have = static_cast<uint64_t>(st.st_size);

  const json now = describe(fp);
  if (have > 0) {
    auto text = detail::read_whole_file(meta_path);
    json was = text.ok() ? json::parse(*text, nullptr, false) : json();
    std::string why;
    if (!text.ok()) {
      why = "nothing says what its bytes are of (" + meta_path + " is missing)";
    } else if (was != now) {
      why = "its bytes are of another version of the file (was " + was.dump() + ", now " + now.dump() + ")";
    } else if (have > fp.size) {
      why = "it is larger than the file (" + std::to_string(have) + " of " + std::to_string(fp.size) + " bytes)";
    }
    if (!why.empty()) {
      note(partial + ": " + why + "; starting over");
      if (::ftruncate(f.fd, 0) != 0) return Error{partial + ": cannot truncate: " + detail::errno_text(errno)};
      have = 0;
    }
  }
  DF_TRY(detail::write_file_durably(meta_path, now.dump() + "\n"));

  detail::Sha256 hash;
  DF_ASSIGN(io::AlignedBuffer buf, io::AlignedBuffer::allocate(kWindow));
  // The bytes already there count towards the hash: read them back.
  for (uint64_t at = 0; at < have;) {
    const uint64_t n = std::min(kWindow, have - at);
    ssize_t r = ::pread(f.fd, buf.data(), n, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return Error{partial + ": read at offset " + std::to_string(at) + " failed: " + detail::errno_text(errno)};
    hash.update(buf.data(), static_cast<size_t>(r));
    at += static_cast<uint64_t>(r);
  }
  if (have > 0) note("resuming " + name + " at " + format_size(have) + " of " + format_size(fp.size));

  DownloadResult res;
  res.resumed_at = have;
  res.etag = fp.etag;
  res.last_modified = fp.last_modified;
  const auto t0 = Clock::now();
  auto report = [&](uint64_t done, bool finished) {
    if (!o.on_progress) return;
    o.on_progress({.name = name, .done = done, .total = fp.size, .this_run = done - have,
                   .seconds = std::chrono::duration<double>(Clock::now() - t0).count(), .finished = finished});
  };
  auto kept = [&](const Error& e, uint64_t at) {
    return Error{e.message + "; " + format_size(at) + " of " + format_size(fp.size) + " kept in " + partial +
                 ": run again to resume"};
  };
  // Two windows: the next one is fetched on another thread while this one is written and hashed (one request in
  // flight at a time: the source is never used by two threads at once).
  DF_ASSIGN(io::AlignedBuffer spare, io::AlignedBuffer::allocate(kWindow));
  io::AlignedBuffer* bufs[2] = {&buf, &spare};
  auto fetch = [&](uint64_t at, int slot) {
    const uint64_t n = std::min(kWindow, fp.size - at);
    uint8_t* dst = bufs[slot]->data();
    return std::async(std::launch::async, [&src, at, n, dst] { return src->read(at, dst, n); });
  };
  uint64_t pos = have;
  int slot = 0;
  std::future<Status> cur;
  if (pos < fp.size) cur = fetch(pos, slot);
  while (pos < fp.size) {
    const uint64_t n = std::min(kWindow, fp.size - pos);
    Status rs = cur.get();
    if (!rs.ok()) return kept(rs.error(), pos);
    std::future<Status> next;  // an error below waits for it in its destructor
    if (pos + n < fp.size) next = fetch(pos + n, 1 - slot);
    const uint8_t* data = bufs[slot]->data();
    uint64_t written = 0;
    Status ws = write_all(f.fd, partial, data, n, pos, written);
    if (!ws.ok()) return kept(ws.error(), pos + written);
    hash.update(data, n);
    pos += n;
    if (pos < fp.size) report(pos, false);
    cur = std::move(next);
    slot = 1 - slot;
  }
  if (::fdatasync(f.fd) != 0) return Error{partial + ": fdatasync failed: " + detail::errno_text(errno)};
  res.bytes = pos;
  res.sha256 = hash.hex();
  if (!o.sha256.empty() && res.sha256 != lower(o.sha256)) {
    ::unlink(partial.c_str());
    ::unlink(meta_path.c_str());
    return Error{fp.location + ": the downloaded bytes' sha256 is " + res.sha256 + ", the repository says " +
                 lower(o.sha256) + "; the download was removed (run again to fetch it anew)"};
  }
  if (::rename(partial.c_str(), path.c_str()) != 0)
    return Error{path + ": cannot rename " + partial + " into place: " + detail::errno_text(errno)};
  DF_TRY(detail::remove_durably(meta_path));
  DF_TRY(detail::fsync_dir(fs::path(path).parent_path().string()));
  report(pos, true);
  return res;
}

}  // namespace df::store
