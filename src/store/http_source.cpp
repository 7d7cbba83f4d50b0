// Range requests with resume: a read is one GET of `bytes=a-b` sent with If-Range (the ETag, or Last-Modified), so a
// server whose file changed answers 200 with the new file instead of the asked bytes of the old one. A transfer
// that breaks off keeps what arrived and asks for the rest, with back-off, until it moves again or nothing has come
// for HttpOptions::timeout_s. Credentials go through CURLOPT_USERNAME/PASSWORD (or a netrc); the URL that is shown
// and stored has none.
#include "store/http_source.h"

#include <curl/curl.h>

#include <cmath>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "store/url.h"

namespace df::store {

namespace {

using Clock = std::chrono::steady_clock;

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i])))
      return false;
  return true;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  return std::string(s);
}

// "bytes 100-199/1000" -> first 100, total 1000; "bytes */1000" (a 416) -> total 1000, first unset.
struct ContentRange {
  bool valid = false;
  uint64_t first = UINT64_MAX, last = 0, total = UINT64_MAX;
};
ContentRange parse_content_range(const std::string& v) {
  ContentRange r;
  unsigned long long a = 0, b = 0, t = 0;
  if (std::sscanf(v.c_str(), "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
    r = {true, a, b, t};
  } else if (std::sscanf(v.c_str(), "bytes */%llu", &t) == 1) {
    r.valid = true;
    r.total = t;
  }
  return r;
}

// One response's view: what the headers said and how many body bytes landed in the caller's buffer.
struct Attempt {
  long status = 0;
  std::string etag, last_modified;
  ContentRange range;
  uint64_t got = 0;
  uint64_t want_first = 0, want = 0;
  uint8_t* dst = nullptr;
  bool accept_200 = false;  // the whole file was asked for: a 200 carries the same bytes
  std::string refused;      // why the body was not taken (wrong status, other range, changed file)
  CURLcode code = CURLE_OK;
  char errbuf[CURL_ERROR_SIZE] = {};
  // When a byte last came, for this read across its attempts; an attempt is cut once it is `timeout` old.
  Clock::time_point* last_byte = nullptr;
  Clock::duration timeout{};

  // What went wrong, in words, for a retry line or the final error.
  std::string failure() const {
    if (code == CURLE_ABORTED_BY_CALLBACK) return "nothing came until the timeout";
    if (code != CURLE_OK && code != CURLE_WRITE_ERROR) return errbuf[0] ? errbuf : curl_easy_strerror(code);
    if (!refused.empty()) return refused;
    return got > 0 ? "the connection closed early" : "status " + std::to_string(status);
  }
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* a = static_cast<Attempt*>(user);
  std::string_view line(data, size * n);
  if (starts_with_nocase(line, "HTTP/")) {  // a new response (after a redirect, or a 100 Continue)
    a->etag.clear();
    a->last_modified.clear();
    a->range = {};
  } else if (starts_with_nocase(line, "etag:")) {
    a->etag = trim(line.substr(5));
  } else if (starts_with_nocase(line, "last-modified:")) {
    a->last_modified = trim(line.substr(14));
  } else if (starts_with_nocase(line, "content-range:")) {
    a->range = parse_content_range(trim(line.substr(14)));
  }
  return size * n;
}

class HttpSource final : public Source {
 public:
  HttpSource(CURL* curl, const std::string& url, const HttpOptions& o)
      : curl_(curl), options_(o), url_(detail::split_credentials(url)) {
    fp_.location = redact_url(url);
    if (!url_.has_user && !options_.auth.empty()) {
      const size_t colon = options_.auth.find(':');
      url_.has_user = true;
      url_.user = options_.auth.substr(0, colon);
      url_.has_password = colon != std::string::npos;
      if (url_.has_password) url_.password = options_.auth.substr(colon + 1);
    }
  }
  ~HttpSource() override { curl_easy_cleanup(curl_); }

  Status probe();
  const Fingerprint& fingerprint() const override { return fp_; }
  Status read(uint64_t offset, void* dst, size_t n) override;
  bool changed() const override { return changed_; }

 private:
  static size_t on_body(char* data, size_t size, size_t n, void* user);
  void request(Attempt& a, bool conditional);
  // After a failed attempt: false once nothing has come for the timeout (or too many attempts in a row failed);
  // otherwise says so on on_retry, waits the back-off and returns true.
  bool retry(const Attempt& a, const std::string& what, unsigned fails, unsigned& delay, Clock::time_point last_byte);
  std::string gave_up(const Attempt& a, unsigned fails, Clock::time_point last_byte) const;
  std::string range_text(uint64_t first, uint64_t n) const {
    return "bytes=" + std::to_string(first) + "-" + std::to_string(first + n - 1);
  }
  Clock::duration timeout() const {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_s));
  }
  Error changed_error(const std::string& what) {
    changed_ = true;
    return Error{fp_.location + ": the file changed since it was opened (" + what + ")"};
  }

  CURL* curl_;
  HttpOptions options_;
  detail::UrlParts url_;  // what is asked for, and with which login
  Fingerprint fp_;
  bool changed_ = false;
};

size_t HttpSource::on_body(char* data, size_t size, size_t n, void* user) {
  auto* a = static_cast<Attempt*>(user);
  size_t len = size * n;
  if (a->got == 0 && a->refused.empty()) {
    // Decide once per response, before taking its first byte.
    if (a->status == 206) {
      if (!a->range.valid || a->range.first != a->want_first)
        a->refused = "asked for bytes from " + std::to_string(a->want_first) + ", got Content-Range from " +
                     (a->range.valid ? std::to_string(a->range.first) : std::string("(none)"));
    } else if (!(a->status == 200 && a->accept_200)) {
      a->refused = "status " + std::to_string(a->status);
    }
    if (!a->refused.empty()) return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  if (!a->refused.empty()) return 0;
  if (a->got + len > a->want) {
    a->refused = "the server sent more than the " + std::to_string(a->want) + " bytes asked for";
    return 0;
  }
  std::memcpy(a->dst + a->got, data, len);
  a->got += len;
  if (a->last_byte && len > 0) *a->last_byte = Clock::now();
  return len;
}

void HttpSource::request(Attempt& a, bool conditional) {
  curl_easy_setopt(curl_, CURLOPT_URL, url_.url.c_str());
  if (url_.has_user) {
    curl_easy_setopt(curl_, CURLOPT_USERNAME, url_.user.c_str());
    if (url_.has_password) curl_easy_setopt(curl_, CURLOPT_PASSWORD, url_.password.c_str());
  } else {
    curl_easy_setopt(curl_, CURLOPT_NETRC, static_cast<long>(CURL_NETRC_OPTIONAL));
    if (!options_.netrc_file.empty()) curl_easy_setopt(curl_, CURLOPT_NETRC_FILE, options_.netrc_file.c_str());
  }
  std::string range = range_text(a.want_first, a.want).substr(6);
  curl_easy_setopt(curl_, CURLOPT_RANGE, range.c_str());
  curl_slist* headers = nullptr;
  for (const std::string& h : options_.headers) headers = curl_slist_append(headers, h.c_str());
  std::string if_range;
  if (conditional && (!fp_.etag.empty() || !fp_.last_modified.empty())) {
    // A weak ETag may not be used in If-Range (RFC 9110 13.1.5); Last-Modified then.
    bool weak = fp_.etag.starts_with("W/");
    if (!fp_.etag.empty() && !weak) {
      if_range = "If-Range: " + fp_.etag;
    } else if (!fp_.last_modified.empty()) {
      if_range = "If-Range: " + fp_.last_modified;
    }
    if (!if_range.empty()) headers = curl_slist_append(headers, if_range.c_str());
  }
  curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl_, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT, options_.connect_timeout_s);
  curl_easy_setopt(curl_, CURLOPT_LOW_SPEED_LIMIT, 1L);
  // A stalled attempt is dropped after a third of the timeout at most, so that a short timeout still gets a fresh
  // connection or two before it gives up.
  const long stall = std::max(1L, std::min(options_.stall_timeout_s, static_cast<long>(options_.timeout_s / 3)));
  curl_easy_setopt(curl_, CURLOPT_LOW_SPEED_TIME, stall);
  // libcurl calls this about once a second even while nothing moves: it ends an attempt at the read's deadline.
  curl_easy_setopt(curl_, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl_, CURLOPT_XFERINFODATA, &a);
  curl_easy_setopt(curl_, CURLOPT_XFERINFOFUNCTION,
                   +[](void* u, curl_off_t, curl_off_t, curl_off_t, curl_off_t) -> int {
                     const auto* at = static_cast<const Attempt*>(u);
                     return at->last_byte && Clock::now() - *at->last_byte > at->timeout ? 1 : 0;
                   });
  curl_easy_setopt(curl_, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl_, CURLOPT_HEADERDATA, &a);
  curl_easy_setopt(curl_, CURLOPT_ERRORBUFFER, a.errbuf);
  curl_easy_setopt(curl_, CURLOPT_FAILONERROR, 0L);
  // on_body needs the status before it takes the first byte; CURLINFO has it once the headers are in.
  struct Ctx {
    Attempt* a;
    CURL* c;
  } ctx{&a, curl_};
  curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &ctx);
  curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, +[](char* d, size_t s, size_t n, void* u) -> size_t {
    auto* c = static_cast<Ctx*>(u);
    if (c->a->got == 0 && c->a->refused.empty()) curl_easy_getinfo(c->c, CURLINFO_RESPONSE_CODE, &c->a->status);
    return on_body(d, s, n, c->a);
  });
  a.code = curl_easy_perform(curl_);
  long status = 0;
  curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status);
  a.status = status;
  curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
}

Status HttpSource::probe() {
  Attempt a;
  uint8_t byte = 0;
  a.want_first = 0;
  a.want = 1;
  a.dst = &byte;
  unsigned fails = 0;
  unsigned delay = options_.retry_delay_ms;
  Clock::time_point last_byte = Clock::now();
  for (;;) {
    a = Attempt{};
    a.want = 1;
    a.dst = &byte;
    a.last_byte = &last_byte;
    a.timeout = timeout();
    request(a, false);
    bool transport = a.code != CURLE_OK && a.code != CURLE_WRITE_ERROR;
    if (!transport && a.status < 500) break;
    if (!retry(a, "bytes=0-0", ++fails, delay, last_byte))
      return Error{fp_.location + ": cannot reach the server: " + gave_up(a, fails, last_byte)};
  }
  if (a.status == 401 || a.status == 407)
    return Error{fp_.location + ": answered " + std::to_string(a.status) + " (authentication required)" +
                 (url_.has_user ? std::string(": the server refused the login for ") + url_.user
                                : std::string(": give a login in the URL (user:password@), in DISKFORMER_HTTP_AUTH, "
                                              "or in a netrc"))};
  if (a.status == 416) return Error{fp_.location + ": answered 416 Range Not Satisfiable to bytes=0-0: the file is empty"};
  if (a.status == 200)
    return Error{fp_.location + ": the server does not answer Range requests (status 200 to bytes=0-0); " +
                 "ingest needs them to read parts of the file and to resume"};
  if (a.status != 206)
    return Error{fp_.location + ": answered status " + std::to_string(a.status) + " to a Range request for bytes=0-0"};
  if (!a.range.valid || a.range.total == UINT64_MAX)
    return Error{fp_.location + ": a 206 answer without a usable Content-Range header (file size unknown)"};
  fp_.size = a.range.total;
  fp_.etag = a.etag;
  fp_.last_modified = a.last_modified;
  return {};
}

Status HttpSource::read(uint64_t offset, void* dst, size_t n) {
  if (offset + n > fp_.size)
    return Error{fp_.location + ": read of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                 " goes past the end (" + std::to_string(fp_.size) + " bytes)"};
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  unsigned fails = 0;
  unsigned delay = options_.retry_delay_ms;
  Clock::time_point last_byte = Clock::now();
  while (done < n) {
    Attempt a;
    a.want_first = offset + done;
    a.want = n - done;
    a.dst = out + done;
    a.last_byte = &last_byte;
    a.timeout = timeout();
    a.accept_200 = a.want_first == 0 && a.want == fp_.size;
    request(a, true);
    done += a.got;
    std::string range = range_text(a.want_first, a.want);
    if (a.status == 206 || a.status == 200) {
      // What a 206 or 200 says about the file must match what open() saw.
      if (!a.etag.empty() && !fp_.etag.empty() && a.etag != fp_.etag)
        return changed_error("ETag " + fp_.etag + " -> " + a.etag);
      if (a.range.valid && a.range.total != UINT64_MAX && a.range.total != fp_.size)
        return changed_error("size " + std::to_string(fp_.size) + " -> " + std::to_string(a.range.total));
    }
    if (a.status == 200 && !a.accept_200)
      return changed_error("answered 200 with the whole file to " + range + " sent with If-Range");
    if (a.status == 416)
      return changed_error("answered 416 Range Not Satisfiable to " + range + ": now smaller than " +
                           std::to_string(fp_.size) + " bytes" +
                           (a.range.valid ? " (" + std::to_string(a.range.total) + ")" : std::string()));
    if (a.status == 400)
      return Error{fp_.location + ": answered 400 Bad Request to the Range request " + range};
    if (a.status == 206 && !a.refused.empty())
      return Error{fp_.location + ": unusable answer to " + range + ": " + a.refused};
    if (a.status >= 400 && a.status < 500)
      return Error{fp_.location + ": answered status " + std::to_string(a.status) + " to " + range};
    if (done == n) break;
    // A dropped connection, a stalled transfer, a 5xx: ask again for the rest.
    if (a.got > 0) {
      fails = 0;
      delay = options_.retry_delay_ms;
    }
    if (!retry(a, range, ++fails, delay, last_byte))
      return Error{fp_.location + ": " + range + ": " + gave_up(a, fails, last_byte)};
  }
  return {};
}

bool HttpSource::retry(const Attempt& a, const std::string& what, unsigned fails, unsigned& delay,
                       Clock::time_point last_byte) {
  const auto silent = Clock::now() - last_byte;
  if (fails > options_.max_retries || silent >= timeout()) return false;
  // An attempt that brought bytes is asked again at once; one that brought none waits, at most until the deadline.
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(timeout() - silent);
  const auto wait = a.got > 0 ? std::chrono::milliseconds(0)
                              : std::min(std::chrono::milliseconds(delay), left);
  if (options_.on_retry)
    options_.on_retry(fp_.location + ": " + what + ": " + a.failure() + "; retrying in " +
                      std::to_string(wait.count()) + " ms (attempt " + std::to_string(fails + 1) + ")");
  std::this_thread::sleep_for(wait);
  if (a.got == 0) delay = std::min(delay * 2, 2000u);
  return true;
}

std::string HttpSource::gave_up(const Attempt& a, unsigned fails, Clock::time_point last_byte) const {
  const double silent = std::chrono::duration<double>(Clock::now() - last_byte).count();
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", silent);
  if (silent >= options_.timeout_s)
    return std::string("no data for ") + secs + " s, the timeout (ingest --timeout), after " + std::to_string(fails) +
           " attempts" + (a.code == CURLE_ABORTED_BY_CALLBACK ? std::string() : "; the last: " + a.failure());
  return "no progress after " + std::to_string(fails) + " attempts: " + a.failure();
}

}  // namespace

Result<HttpResponse> http_get(const std::string& url, const HttpOptions& o, size_t max_bytes) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  const detail::UrlParts u = detail::split_credentials(url);
  const std::string shown = redact_url(url);
  unsigned delay = o.retry_delay_ms;
  for (unsigned attempt = 0;; ++attempt) {
    CURL* curl = curl_easy_init();
    if (!curl) return Error{shown + ": cannot start an HTTP client (curl_easy_init failed)"};
    struct Body {
      std::string text;
      size_t max = 0;
      bool too_big = false;
    } body{{}, max_bytes, false};
    char errbuf[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(curl, CURLOPT_URL, u.url.c_str());
    if (u.has_user) {
      curl_easy_setopt(curl, CURLOPT_USERNAME, u.user.c_str());
      if (u.has_password) curl_easy_setopt(curl, CURLOPT_PASSWORD, u.password.c_str());
    } else {
      curl_easy_setopt(curl, CURLOPT_NETRC, static_cast<long>(CURL_NETRC_OPTIONAL));
      if (!o.netrc_file.empty()) curl_easy_setopt(curl, CURLOPT_NETRC_FILE, o.netrc_file.c_str());
    }
    curl_slist* headers = nullptr;
    for (const std::string& h : o.headers) headers = curl_slist_append(headers, h.c_str());
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, o.connect_timeout_s);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, std::max(1L, static_cast<long>(o.timeout_s)));
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, +[](char* d, size_t s, size_t n, void* p) -> size_t {
      auto* b = static_cast<Body*>(p);
      if (b->text.size() + s * n > b->max) {
        b->too_big = true;
        return 0;
      }
      b->text.append(d, s * n);
      return s * n;
    });
    const CURLcode code = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(curl);
    curl_slist_free_all(headers);
    if (body.too_big) return Error{shown + ": the answer is larger than " + std::to_string(max_bytes) + " bytes"};
    const bool transport = code != CURLE_OK;
    if (!transport && status < 500) return HttpResponse{status, std::move(body.text)};
    const std::string why = transport ? (errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(code)))
                                      : "status " + std::to_string(status);
    if (attempt >= o.max_retries) return Error{shown + ": " + why + " (after " + std::to_string(attempt + 1) + " attempts)"};
    if (o.on_retry)
      o.on_retry(shown + ": " + why + "; retrying in " + std::to_string(delay) + " ms (attempt " +
                 std::to_string(attempt + 2) + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    delay = std::min(delay * 2, 2000u);
  }
}

Result<std::unique_ptr<Source>> open_http_source(const std::string& url, const HttpOptions& options) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* curl = curl_easy_init();
  if (!curl) return Error{redact_url(url) + ": cannot start an HTTP client (curl_easy_init failed)"};
  auto src = std::make_unique<HttpSource>(curl, url, options);
  DF_TRY(src->probe());
  return std::unique_ptr<Source>(std::move(src));
}

}  // namespace df::store
