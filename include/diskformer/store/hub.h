// Models by name, fetched the way llama.cpp fetches them: `-hf ORG/REPO[:QUANT]` through the Hugging Face API, and
// `-m URL`. Files are downloaded (download.h: resumed, checksummed) into a cache directory and opened from there;
// a split model's every part comes along.
//
//   -hf: GET {endpoint}api/models/ORG/REPO/refs                     -> the commit of branch main (else the first)
//        GET {endpoint}api/models/ORG/REPO/tree/COMMIT?recursive=true -> the files: path, size, oid, lfs.oid (sha256)
//        GET {endpoint}ORG/REPO/resolve/COMMIT/PATH                  -> each file picked (Range requests)
//
// The cache is laid out as the Hugging Face hub's (llama.cpp's -hf cache too), so one can be pointed at the other:
//   CACHE/models--ORG--REPO/refs/main                         the commit last resolved
//   CACHE/models--ORG--REPO/blobs/OID                         a file's bytes, named by its sha256 (LFS) or git oid
//   CACHE/models--ORG--REPO/snapshots/COMMIT/PATH -> ../../blobs/OID
//   CACHE/url/HOST/NAME, NAME.json                            a file fetched by -m URL, and its URL, size and ETag
// Where the API cannot be reached, the snapshot of the commit last resolved is used (and said so).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "diskformer/store/download.h"
#include "diskformer/store/source.h"
#include "diskformer/util/result.h"

namespace df::store::hub {

// "ORG/REPO[:QUANT]". The error says what a repository name may hold.
struct RepoName {
  std::string repo;   // ORG/REPO
  std::string quant;  // "" where none was given
};
Result<RepoName> parse_repo(std::string_view text);

struct RepoFile {
  std::string path;    // inside the repository
  uint64_t size = 0;   // 0 where unknown (a cached snapshot)
  std::string oid;     // the blob's name in the cache: the LFS sha256, else the git oid; "" where unknown
  std::string sha256;  // the LFS sha256 where the listing gives one
};

// What a file's name says: a split part "PREFIX-0000K-of-0000N.gguf" (index 1-based), and its quant tag, the last
// "-TAG" or ".TAG" of the name before ".gguf" and the split suffix, upper-cased ("Q4_K_M").
struct NameInfo {
  bool gguf = false;
  std::string prefix;  // the path without ".gguf" and without the split suffix
  std::string tag;
  uint32_t index = 1, count = 1;
};
NameInfo name_info(std::string_view path);

// llama.cpp's choice of a repository's model: the first model GGUF (not an mmproj, imatrix or draft head) whose path
// holds QUANT followed by '.' or '-' (any case); without a quant Q4_K_M, then Q8_0, then the first model GGUF. A
// split model is chosen by its first part and comes with its other parts, in order. The error lists the GGUFs there.
Result<std::vector<RepoFile>> pick_model(const std::vector<RepoFile>& files, const std::string& quant,
                                         const std::string& repo);

struct HubOptions {
  std::string endpoint;   // ends with '/': https://huggingface.co/
  std::string cache_dir;
  std::string token;      // sent as "Authorization: Bearer TOKEN" where given
  HttpOptions http;
  std::function<void(const DownloadProgress&)> on_progress;
  std::function<void(const std::string&)> on_note;  // cached, resumed, fetched, offline
};
// MODEL_ENDPOINT, else HF_ENDPOINT (llama.cpp's variables), else https://huggingface.co/; with a trailing '/'.
std::string endpoint_from_env();
// DISKFORMER_CACHE, else $XDG_CACHE_HOME/diskformer, else $HOME/.cache/diskformer.
Result<std::string> cache_dir_from_env();

struct Fetched {
  std::string path;                // what to open: the model's file, or its first part
  std::vector<std::string> files;  // every file of the model, in the cache
  std::string commit;              // -hf: the commit the files are of
  uint64_t downloaded = 0;         // bytes this call fetched (0: everything was in the cache)
};
// `file` (llama.cpp's --hf-file): this path of the repository instead of the quant's choice.
Result<Fetched> fetch_repo(const std::string& repo_and_quant, const std::string& file, const HubOptions& options);
// A URL of a GGUF, or of the first part of a split one (its other parts' URLs made from it).
Result<Fetched> fetch_url(const std::string& url, const HubOptions& options);

}  // namespace df::store::hub
