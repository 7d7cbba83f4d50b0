#include "diskformer/store/hub.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "diskformer/util/size.h"
#include "store/files.h"
#include "store/http_source.h"
#include "store/url.h"

namespace df::store::hub {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool is_hex(std::string_view s, size_t n) {
  return s.size() == n &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// A path inside a repository that stays inside the directory it is joined to.
bool is_safe_subpath(std::string_view p) {
  if (p.empty() || p.front() == '/') return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string_view::npos) end = p.size();
    std::string_view seg = p.substr(start, end - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    start = end + 1;
  }
  return true;
}

// Percent-encodes what a URL path may not carry as it is (a space in a file name); '/' stays.
std::string encode_path(std::string_view p) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : p) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

bool is_model_gguf(const std::string& path) {
  if (!path.ends_with(".gguf")) return false;
  const std::string name = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  for (const char* other : {"mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"})
    if (name.find(other) != std::string::npos) return false;
  return true;
}

std::string gguf_list(const std::vector<RepoFile>& files) {
  std::string out;
  for (const auto& f : files)
    if (f.path.ends_with(".gguf")) out += (out.empty() ? "" : ", ") + f.path;
  return out.empty() ? "none" : out;
}

// The API's small answers, and the probe of a cached file, are asked a few times only: where the server cannot be
// reached the cache serves, and it should not wait for a download's patience first.
constexpr unsigned kQuickRetries = 2;

HttpOptions api_options(const HubOptions& o) {
  HttpOptions h = o.http;
  h.max_retries = std::min(h.max_retries, kQuickRetries);
  h.headers.push_back("Accept: application/json");
  if (!o.token.empty()) h.headers.push_back("Authorization: Bearer " + o.token);
  return h;
}

// The JSON of an API path; an HTTP error names the URL, the status and the API's "error" text.
Result<json> api_get(const std::string& url, const HubOptions& o, bool* unreachable) {
  auto r = http_get(url, api_options(o));
  if (!r.ok()) {
    *unreachable = true;
    return r.take_error();
  }
  json j = json::parse(r->body, nullptr, false);
  if (r->status != 200) {
    std::string why = "status " + std::to_string(r->status);
    if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_string())
      why += ": " + j["error"].get<std::string>();
    if (r->status == 401 || r->status == 403)
      why += o.token.empty() ? " (a gated or private repository needs a token: set HF_TOKEN)"
                             : " (the token in HF_TOKEN was refused)";
    return Error{redact_url(url) + ": " + why};
  }
  if (j.is_discarded()) return Error{redact_url(url) + ": the answer is not JSON"};
  return j;
}

std::string repo_folder(const std::string& repo) {
  std::string out = "models--" + repo;
  for (size_t p; (p = out.find('/')) != std::string::npos;) out.replace(p, 1, "--");
  return out;
}

// The branch main's commit, else the first branch's.
Result<std::string> pick_commit(const json& refs, const std::string& url) {
  if (!refs.is_object() || !refs.contains("branches") || !refs["branches"].is_array())
    return Error{url + ": no \"branches\" array in the answer"};
  std::string commit;
  for (const auto& b : refs["branches"]) {
    if (!b.is_object() || !b.contains("name") || !b["name"].is_string() || !b.contains("targetCommit") ||
        !b["targetCommit"].is_string())
      continue;
    const std::string c = b["targetCommit"].get<std::string>();
    if (!is_hex(c, 40)) continue;
    if (b["name"] == "main") return c;
    if (commit.empty()) commit = c;
  }
  if (commit.empty()) return Error{url + ": no branch with a valid commit"};
  return commit;
}

Result<std::vector<RepoFile>> parse_tree(const json& tree, const std::string& url) {
  if (!tree.is_array()) return Error{url + ": the answer is not a JSON array of files"};
  std::vector<RepoFile> files;
  for (const auto& item : tree) {
    if (!item.is_object() || item.value("type", "") != "file" || !item.contains("path") || !item["path"].is_string())
      continue;
    RepoFile f;
    f.path = item["path"].get<std::string>();
    if (!is_safe_subpath(f.path)) continue;  // "../x" would land outside the snapshot
    if (item.contains("size") && item["size"].is_number_unsigned()) f.size = item["size"].get<uint64_t>();
    if (item.contains("lfs") && item["lfs"].is_object()) {
      const json& lfs = item["lfs"];
      if (lfs.contains("oid") && lfs["oid"].is_string()) f.sha256 = lfs["oid"].get<std::string>();
      if (lfs.contains("size") && lfs["size"].is_number_unsigned()) f.size = lfs["size"].get<uint64_t>();
      if (!is_hex(f.sha256, 64))
        return Error{url + ": file " + f.path + ": lfs.oid \"" + f.sha256 + "\" is not a sha256 (64 hex digits)"};
      f.oid = f.sha256;
    } else if (item.contains("oid") && item["oid"].is_string()) {
      f.oid = item["oid"].get<std::string>();
      if (!is_hex(f.oid, 40) && !is_hex(f.oid, 64))
        return Error{url + ": file " + f.path + ": oid \"" + f.oid + "\" is not a git object id"};
    }
    files.push_back(std::move(f));
  }
  return files;
}

bool exists_resolved(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// snapshots/COMMIT/PATH -> ../../blobs/OID (relative, as the hub writes it); where links cannot be made, the blob
// is moved there instead.
Status link_snapshot(const fs::path& blob, const fs::path& entry) {
  std::error_code ec;
  fs::create_directories(entry.parent_path(), ec);
  if (ec) return Error{entry.parent_path().string() + ": cannot create the directory: " + ec.message()};
  fs::remove(entry, ec);
  const fs::path target = fs::relative(blob, entry.parent_path(), ec);
  if (!ec) fs::create_symlink(target, entry, ec);
  if (!ec) return {};
  fs::rename(blob, entry, ec);
  if (ec) return Error{entry.string() + ": cannot link or move " + blob.string() + " there: " + ec.message()};
  return {};
}

// Every regular file (or link to one) under a cached snapshot, as repository paths.
std::vector<RepoFile> cached_files(const fs::path& snapshot) {
  std::vector<RepoFile> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(snapshot, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!exists_resolved(it->path())) continue;
    out.push_back({it->path().lexically_relative(snapshot).generic_string(), 0, "", ""});
  }
  std::sort(out.begin(), out.end(), [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
  return out;
}

DownloadOptions download_options(const HubOptions& o, const std::string& name) {
  DownloadOptions d;
  d.http = o.http;
  d.name = name;
  d.on_progress = o.on_progress;
  d.on_note = o.on_note;
  return d;
}

// The file and, where it is the first part of a split model, its other parts in order.
Result<std::vector<RepoFile>> with_parts(const std::vector<RepoFile>& files, const RepoFile& primary,
                                         const std::string& repo) {
  const NameInfo pn = name_info(primary.path);
  if (pn.count <= 1) return std::vector<RepoFile>{primary};
  std::vector<const RepoFile*> parts(pn.count, nullptr);
  for (const auto& f : files) {
    const NameInfo n = name_info(f.path);
    if (n.count == pn.count && n.prefix == pn.prefix && n.index >= 1 && n.index <= n.count) parts[n.index - 1] = &f;
  }
  std::vector<RepoFile> out;
  for (uint32_t k = 0; k < pn.count; ++k) {
    if (!parts[k])
      return Error{repo + ": " + primary.path + " is part " + std::to_string(pn.index) + " of a split model of " +
                   std::to_string(pn.count) + " parts, but the repository has no part " + std::to_string(k + 1)};
    out.push_back(*parts[k]);
  }
  return out;
}

}  // namespace

Result<RepoName> parse_repo(std::string_view text) {
  RepoName r;
  const size_t colon = text.find(':');
  r.repo = std::string(text.substr(0, colon));
  if (colon != std::string_view::npos) r.quant = std::string(text.substr(colon + 1));
  // [A-Za-z0-9_] with '/', '.' or '-' between them, exactly one '/' (the hub's rule, as llama.cpp checks it).
  int slashes = 0;
  bool after_special = true;
  bool ok = !r.repo.empty() && r.repo.size() <= 256;
  for (char c : r.repo) {
    if (is_word_char(c)) {
      after_special = false;
    } else if ((c == '/' || c == '.' || c == '-') && !after_special) {
      slashes += c == '/';
      after_special = true;
    } else {
      ok = false;
    }
  }
  if (!ok || after_special || slashes != 1)
    return Error{"\"" + std::string(text) + "\" is not a repository: expected ORG/REPO[:QUANT] (letters, digits, '_', "
                 "and '.', '-' between them)"};
  if (colon != std::string_view::npos &&
      (r.quant.empty() || !std::all_of(r.quant.begin(), r.quant.end(), [](char c) { return is_word_char(c); })))
    return Error{"\"" + std::string(text) + "\": the quant after ':' must be letters, digits and '_' (Q4_K_M)"};
  return r;
}

NameInfo name_info(std::string_view path) {
  NameInfo n;
  if (!path.ends_with(".gguf")) return n;
  n.gguf = true;
  std::string p(path.substr(0, path.size() - 5));
  // -0000K-of-0000N
  constexpr size_t kSuffix = 15;
  if (p.size() > kSuffix) {
    const std::string s = p.substr(p.size() - kSuffix);
    auto digits = [&](size_t at) {
      return std::all_of(s.begin() + at, s.begin() + at + 5, [](char c) { return c >= '0' && c <= '9'; });
    };
    if (s[0] == '-' && digits(1) && s.compare(6, 4, "-of-") == 0 && digits(10)) {
      n.index = static_cast<uint32_t>(std::stoul(s.substr(1, 5)));
      n.count = static_cast<uint32_t>(std::stoul(s.substr(10, 5)));
      p.resize(p.size() - kSuffix);
    }
  }
  n.prefix = p;
  size_t i = p.size();
  while (i > 0 && is_word_char(p[i - 1])) --i;
  if (i > 0 && i < p.size() && (p[i - 1] == '-' || p[i - 1] == '.')) n.tag = upper(p.substr(i));
  return n;
}

Result<std::vector<RepoFile>> pick_model(const std::vector<RepoFile>& files, const std::string& quant,
                                         const std::string& repo) {
  std::vector<std::string> tags = quant.empty() ? std::vector<std::string>{"Q4_K_M", "Q8_0"}
                                                : std::vector<std::string>{quant};
  const RepoFile* primary = nullptr;
  auto first_part = [](const RepoFile& f) {
    const NameInfo n = name_info(f.path);
    return n.count <= 1 || n.index == 1;
  };
  for (const std::string& t : tags) {
    const std::string u = upper(t);
    for (const auto& f : files) {
      const std::string p = upper(f.path);
      if (is_model_gguf(f.path) && first_part(f) &&
          (p.find(u + ".") != std::string::npos || p.find(u + "-") != std::string::npos)) {
        primary = &f;
        break;
      }
    }
    if (primary) break;
  }
  if (!primary && quant.empty())
    for (const auto& f : files)
      if (is_model_gguf(f.path) && first_part(f)) {
        primary = &f;
        break;
      }
  if (!primary)
    return Error{repo + ": no model GGUF" + (quant.empty() ? std::string() : " of quant " + quant) +
                 " in the repository (its GGUF files: " + gguf_list(files) + ")"};
  return with_parts(files, *primary, repo);
}

std::string endpoint_from_env() {
  std::string e;
  for (const char* var : {"MODEL_ENDPOINT", "HF_ENDPOINT"})
    if (const char* v = std::getenv(var); v && *v) {
      e = v;
      break;
    }
  if (e.empty()) e = "https://huggingface.co/";
  if (e.back() != '/') e += '/';
  return e;
}

Result<std::string> cache_dir_from_env() {
  if (const char* v = std::getenv("DISKFORMER_CACHE"); v && *v) return std::string(v);
  if (const char* v = std::getenv("XDG_CACHE_HOME"); v && *v) return (fs::path(v) / "diskformer").string();
  if (const char* v = std::getenv("HOME"); v && *v) return (fs::path(v) / ".cache" / "diskformer").string();
  return Error{"no cache directory: set DISKFORMER_CACHE (or HOME)"};
}

Result<Fetched> fetch_repo(const std::string& repo_and_quant, const std::string& file, const HubOptions& o) {
  auto note = [&](const std::string& s) {
    if (o.on_note) o.on_note(s);
  };
  DF_ASSIGN(const RepoName name, parse_repo(repo_and_quant));
  const fs::path repo_dir = fs::path(o.cache_dir) / repo_folder(name.repo);
  const std::string api = o.endpoint + "api/models/" + name.repo;

  Fetched out;
  std::vector<RepoFile> listed;
  bool unreachable = false;
  auto refs = api_get(api + "/refs", o, &unreachable);
  Result<std::vector<RepoFile>> tree = Error{""};
  if (refs.ok()) {
    DF_ASSIGN(out.commit, pick_commit(*refs, redact_url(api + "/refs")));
    const std::string tree_url = api + "/tree/" + out.commit + "?recursive=true";
    auto j = api_get(tree_url, o, &unreachable);
    if (j.ok()) tree = parse_tree(*j, redact_url(tree_url));
    else tree = j.take_error();
  }
  const bool online = refs.ok() && tree.ok();
  if (!online && !unreachable) return refs.ok() ? tree.take_error() : refs.take_error();
  if (online) {
    listed = std::move(tree).value();
  } else {
    // The API cannot be reached: the snapshot of the commit last resolved, where there is one.
    const std::string why = refs.ok() ? tree.error().message : refs.error().message;
    auto commit = detail::read_whole_file((repo_dir / "refs" / "main").string());
    std::string c = commit.ok() ? commit.value().substr(0, commit.value().find_first_of("\r\n")) : "";
    if (!is_hex(c, 40))
      return Error{why + "; and " + (repo_dir / "refs" / "main").string() + " names no cached commit of " + name.repo};
    out.commit = c;
    listed = cached_files(repo_dir / "snapshots" / c);
    note("cannot reach " + redact_url(o.endpoint) + " (" + why + "); using the cached snapshot " + c + " of " +
         name.repo);
  }

  std::vector<RepoFile> picked;
  if (!file.empty()) {
    auto it = std::find_if(listed.begin(), listed.end(), [&](const RepoFile& f) { return f.path == file; });
    if (it == listed.end())
      return Error{name.repo + ": no file " + file + " in the repository (its GGUF files: " + gguf_list(listed) + ")"};
    DF_ASSIGN(picked, with_parts(listed, *it, name.repo));
  } else {
    DF_ASSIGN(picked, pick_model(listed, name.quant, name.repo));
  }

  const fs::path snapshot = repo_dir / "snapshots" / out.commit;
  for (const RepoFile& f : picked) {
    const fs::path entry = snapshot / f.path;
    out.files.push_back(entry.string());
    if (exists_resolved(entry) && (f.size == 0 || fs::file_size(entry) == f.size)) continue;
    if (!online) return Error{name.repo + ": " + f.path + " is not in the cache, and the API cannot be reached"};
    const fs::path blob = f.oid.empty() ? entry : repo_dir / "blobs" / f.oid;
    if (!exists_resolved(blob) || fs::file_size(blob) != f.size) {
      DownloadOptions d = download_options(o, f.path.substr(f.path.rfind('/') + 1));
      if (f.size > 0) d.size = f.size;
      d.sha256 = f.sha256;
      if (!o.token.empty()) d.http.headers.push_back("Authorization: Bearer " + o.token);
      const std::string url = o.endpoint + name.repo + "/resolve/" + out.commit + "/" + encode_path(f.path);
      DF_ASSIGN(DownloadResult r, download(url, blob.string(), d));
      out.downloaded += r.bytes - r.resumed_at;
      note("fetched " + f.path + " (" + format_size(r.bytes) + (f.sha256.empty() ? "" : ", sha256 checked") + ")");
    }
    if (blob != entry) DF_TRY(link_snapshot(blob, entry));
  }
  if (online) {
    std::error_code ec;
    fs::create_directories(repo_dir / "refs", ec);
    if (ec) return Error{(repo_dir / "refs").string() + ": cannot create the directory: " + ec.message()};
    DF_TRY(detail::write_file_durably((repo_dir / "refs" / "main").string(), out.commit));
  }
  out.path = out.files.front();
  return out;
}

Result<Fetched> fetch_url(const std::string& url, const HubOptions& o) {
  auto note = [&](const std::string& s) {
    if (o.on_note) o.on_note(s);
  };
  const detail::UrlParts parts = detail::split_credentials(url);
  const std::string bare = parts.url.substr(0, parts.url.find_first_of("?#"));
  const size_t scheme = bare.find("://");
  const size_t host_end = bare.find('/', scheme + 3);
  const std::string host =
      bare.substr(scheme + 3, host_end == std::string::npos ? std::string::npos : host_end - scheme - 3);
  const std::string name = host_end == std::string::npos ? "" : bare.substr(bare.rfind('/') + 1);
  if (name.empty() || !is_safe_subpath(name) || !is_safe_subpath(host))
    return Error{redact_url(url) + ": the URL names no file"};
  // A split model's parts: the URL of each, from the one given (its query, where any, kept on each).
  std::vector<std::string> urls{url};
  const NameInfo n = name_info(name);
  if (n.count > 1) {
    urls.clear();
    const size_t at = url.rfind(name);
    for (uint32_t k = 1; k <= n.count; ++k) {
      char suffix[32];
      std::snprintf(suffix, sizeof suffix, "-%05u-of-%05u.gguf", k, n.count);
      urls.push_back(url.substr(0, at) + n.prefix + suffix + url.substr(at + name.size()));
    }
  }
  auto file_of = [](const std::string& u) {
    const std::string b = u.substr(0, u.find_first_of("?#"));
    return b.substr(b.rfind('/') + 1);
  };
  const fs::path dir = fs::path(o.cache_dir) / "url" / host;
  Fetched out;
  for (const std::string& u : urls) {
    const std::string shown = redact_url(u), file = file_of(shown);
    const fs::path path = dir / file, meta = dir / (file + ".json");
    out.files.push_back(path.string());
    // A cached file is used while the server's still has its size and validators (or the server cannot be asked).
    auto saved = detail::read_whole_file(meta.string());
    const json was = saved.ok() ? json::parse(*saved, nullptr, false) : json();
    if (exists_resolved(path) && was.is_object()) {
      HttpOptions probe = o.http;
      probe.max_retries = std::min(probe.max_retries, kQuickRetries);
      auto src = open_source(u, probe);
      if (!src.ok()) {
        note("cannot reach " + shown + " (" + src.error().message + "); using the cached " + path.string());
        continue;
      }
      const Fingerprint& fp = (*src)->fingerprint();
      if (was.value("url", "") == fp.location && was.value("size", uint64_t{0}) == fp.size &&
          was.value("etag", "") == fp.etag && was.value("last_modified", "") == fp.last_modified &&
          fs::file_size(path) == fp.size)
        continue;
      note(shown + " changed since it was cached; fetching it again");
    }
    DF_ASSIGN(DownloadResult r, download(u, path.string(), download_options(o, file)));
    out.downloaded += r.bytes - r.resumed_at;
    const json now{{"url", shown}, {"size", r.bytes}, {"etag", r.etag}, {"last_modified", r.last_modified},
                   {"sha256", r.sha256}};
    DF_TRY(detail::write_file_durably(meta.string(), now.dump(1) + "\n"));
    note("fetched " + shown + " (" + format_size(r.bytes) + ")");
  }
  out.path = out.files.front();
  return out;
}

}  // namespace df::store::hub
