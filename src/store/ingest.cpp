#include "diskformer/store/ingest.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <future>
#include <optional>
#include <tuple>
#include <thread>
#include <vector>

#include "diskformer/io/buffer.h"
#include "diskformer/store/record.h"
#include "diskformer/store/store.h"
#include "diskformer/util/check.h"
#include "diskformer/util/size.h"
#include "store/files.h"
#include "store/manifest.h"
#include "store/range_hash.h"

namespace df::store {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMaxWindow = 8ull << 20;
constexpr unsigned kMaxRestarts = 3;

// `len` source bytes at `src` go to `dst` in data.bin.
struct Job {
  uint64_t src = 0, len = 0, dst = 0;
};

// The parts of a split source are read as one run of bytes: part k's byte b is byte bases[k] + b, the bases
// 4 KiB-aligned (a window's buffer keeps the phase O_DIRECT needs) with zeros between the parts.
std::vector<uint64_t> part_bases(const std::vector<Fingerprint>& parts) {
  std::vector<uint64_t> bases;
  uint64_t at = 0;
  for (const Fingerprint& fp : parts) {
    bases.push_back(at);
    at = io::align_up(at + fp.size, io::kDirectAlignment);
  }
  return bases;
}

// Every tensor byte of the source belongs to exactly one place in the store: its record or its global tensor.
Result<std::vector<Job>> plan_jobs(const RecordMap& from, const RecordMap& to, const std::vector<uint64_t>& bases) {
  std::vector<Job> jobs;
  DF_CHECK(from.globals().size() == to.globals().size());
  for (size_t i = 0; i < from.globals().size(); ++i) {
    const ByteRange& r = from.globals()[i].second;
    jobs.push_back({bases[r.file] + r.offset, r.length, to.globals()[i].second.offset});
  }
  DF_CHECK(from.layers().size() == to.layers().size());
  for (size_t i = 0; i < from.layers().size(); ++i) {
    const LayerRecord &a = from.layers()[i], &b = to.layers()[i];
    for (const auto& t : a.tensors) jobs.push_back({bases[t.file] + t.file_offset, t.bytes, b.base + t.slot_offset});
  }
  DF_CHECK(from.expert_layers().size() == to.expert_layers().size());
  for (size_t i = 0; i < from.expert_layers().size(); ++i) {
    const ExpertLayerRecords &a = from.expert_layers()[i], &b = to.expert_layers()[i];
    for (uint64_t e = 0; e < a.n_experts; ++e)
      for (const auto& p : a.parts)
        jobs.push_back({bases[p.file] + p.file_offset + e * p.bytes, p.bytes, b.base + e * b.stride + p.slot_offset});
  }
  std::erase_if(jobs, [](const Job& j) { return j.len == 0; });
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.src < b.src; });
  // A hostile header can declare tensors that share bytes; a store needs each byte in one place. (The parts'
  // headers keep each tensor inside its part, so an overlap lies inside one part.)
  for (size_t i = 1; i < jobs.size(); ++i)
    if (jobs[i - 1].src + jobs[i - 1].len > jobs[i].src) {
      const auto k =
          static_cast<size_t>(std::upper_bound(bases.begin(), bases.end(), jobs[i].src) - bases.begin()) - 1;
      return Error{from.files()[k] + ": tensor data overlaps at offset " + std::to_string(jobs[i].src - bases[k]) +
                   " (a range of " + std::to_string(jobs[i - 1].len) + " bytes at " +
                   std::to_string(jobs[i - 1].src - bases[k]) + " runs into it)"};
    }
  return jobs;
}

// The parts read as one run of bytes (part_bases).
class Joined {
 public:
  Joined(std::vector<std::unique_ptr<Source>>& parts, std::vector<uint64_t> bases)
      : parts_(parts), bases_(std::move(bases)) {}
  Status read(uint64_t offset, void* dst, size_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    while (n > 0) {
      size_t k = static_cast<size_t>(std::upper_bound(bases_.begin(), bases_.end(), offset) - bases_.begin()) - 1;
      const uint64_t in = offset - bases_[k], size = parts_[k]->size();
      uint64_t take = 0;
      if (in < size) {
        take = std::min<uint64_t>(n, size - in);
        DF_TRY(parts_[k]->read(in, out, take));
      } else {  // between two parts
        const uint64_t next = k + 1 < bases_.size() ? bases_[k + 1] : UINT64_MAX;
        take = std::min<uint64_t>(n, next - offset);
        std::memset(out, 0, take);
      }
      out += take;
      offset += take;
      n -= take;
    }
    return {};
  }
  bool changed() const {
    return std::any_of(parts_.begin(), parts_.end(), [](const auto& p) { return p->changed(); });
  }
  bool still_same() {
    return std::all_of(parts_.begin(), parts_.end(), [](const auto& p) { return p->still_same(); });
  }

 private:
  std::vector<std::unique_ptr<Source>>& parts_;
  std::vector<uint64_t> bases_;
};

// What one source's header says the store must hold.
struct Plan {
  std::vector<Fingerprint> fps;      // one per part of the source
  std::vector<std::string> headers;  // one per part
  std::vector<uint64_t> bases;       // where each part starts in the joined run of bytes
  RecordMap repacked;
  std::vector<Job> jobs;
  std::vector<uint64_t> done_before;  // bytes of jobs[0..i)
  uint64_t first = 0, end = 0;         // source range the jobs cover
  uint64_t total = 0;
  uint64_t records = 0;

  // The first job that ends after source offset p.
  size_t first_ending_after(uint64_t p) const {
    return static_cast<size_t>(std::upper_bound(jobs.begin(), jobs.end(), p,
                                                [](uint64_t x, const Job& job) { return x < job.src + job.len; }) -
                               jobs.begin());
  }
  // Hashes the job bytes of the window [b, e) of the source, found at `data` (source byte b at data[0]).
  void hash_window(detail::RangeHash& h, uint64_t b, uint64_t e, const uint8_t* data) const {
    for (size_t k = first_ending_after(b); k < jobs.size() && jobs[k].src < e; ++k) {
      const uint64_t from = std::max(jobs[k].src, b), to = std::min(jobs[k].src + jobs[k].len, e);
      if (from < to) h.update(data + (from - b), to - from);
    }
  }

  // Bytes of jobs below source offset pos.
  uint64_t done_at(uint64_t pos) const {
    auto it = std::upper_bound(jobs.begin(), jobs.end(), pos, [](uint64_t p, const Job& j) { return p < j.src; });
    if (it == jobs.begin()) return 0;
    size_t i = static_cast<size_t>(it - jobs.begin()) - 1;
    return done_before[i] + std::min(jobs[i].len, pos - jobs[i].src);
  }
};

Result<Plan> make_plan(ModelSource& src, const std::string& data_path) {
  Plan p;
  p.fps = src.fingerprints;
  p.headers = std::move(src.headers);
  p.bases = part_bases(p.fps);
  const gguf::File& f = src.model;
  DF_ASSIGN(RecordMap in_place, RecordMap::in_place(f));
  DF_ASSIGN(p.repacked, RecordMap::repacked(f, data_path));
  DF_ASSIGN(p.jobs, plan_jobs(in_place, p.repacked, p.bases));
  for (const auto& j : p.jobs) {
    p.done_before.push_back(p.total);
    p.total += j.len;
  }
  if (!p.jobs.empty()) {
    p.first = p.jobs.front().src;
    p.end = p.jobs.back().src + p.jobs.back().len;
  }
  // Each part's parser kept its tensors inside that part; the joined run ends with the last part.
  if (p.end > p.bases.back() + p.fps.back().size)
    return Error{p.fps.back().location + ": tensor data ends at byte " + std::to_string(p.end - p.bases.back()) +
                 ", the file has " + std::to_string(p.fps.back().size)};
  for (const auto& el : p.repacked.expert_layers()) p.records += el.n_experts;
  p.records += p.repacked.layers().size();
  for (const auto& t : p.repacked.tables()) p.records += t.rows;
  return p;
}

class DataFile {
 public:
  ~DataFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  // fresh: a new file (whatever was at the path is unlinked first, so no link or hard link is written through),
  // then reserves `bytes` (zeros) so that a full disk shows up now rather than half-way. Otherwise the existing
  // file, which must be the store's own: not a link, and no other name for its bytes.
  Status open(const std::string& path, uint64_t bytes, bool fresh) {
    path_ = path;
    if (fresh && ::unlink(path.c_str()) != 0 && errno != ENOENT)
      return Error{path + ": cannot remove the old data file: " + detail::errno_text(errno)};
    fd_ = ::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC | (fresh ? O_CREAT | O_EXCL : 0), 0644);
    if (fd_ < 0) return Error{detail::open_error(path, "open for writing", errno)};
    if (!fresh) {
      struct stat st {};
      if (::fstat(fd_, &st) != 0) return Error{path + ": cannot stat: " + detail::errno_text(errno)};
      if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
        return Error{path + ": has " + std::to_string(st.st_nlink) + " names (hard links); refusing to write into " +
                     "bytes another file shares"};
      return {};
    }
    if (::fallocate(fd_, 0, 0, static_cast<off_t>(bytes)) != 0 && errno != EOPNOTSUPP && errno != ENOSYS)
      return Error{path + ": cannot reserve " + std::to_string(bytes) + " bytes (" + format_size(bytes) +
                   ") for the store: " + detail::errno_text(errno)};
    if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
      return Error{path + ": cannot extend to " + std::to_string(bytes) + " bytes: " + detail::errno_text(errno)};
    return sync();
  }
  Status write_at(uint64_t offset, const uint8_t* data, uint64_t n) {
    uint64_t done = 0;
    while (done < n) {
      ssize_t w = ::pwrite(fd_, data + done, n - done, static_cast<off_t>(offset + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        return Error{path_ + ": write of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                     " failed: " + detail::errno_text(w < 0 ? errno : ENOSPC)};
      done += static_cast<uint64_t>(w);
    }
    return {};
  }
  Status sync() {
    if (::fdatasync(fd_) != 0) return Error{path_ + ": fdatasync failed: " + detail::errno_text(errno)};
    return {};
  }

 private:
  int fd_ = -1;
  std::string path_;
};

// What a checkpoint says of the source bytes it added since the one before: the job bytes of [from, to) hash so.
struct Verify {
  uint64_t from = 0, to = 0;
  std::string hash;
};

std::string progress_text(const Plan& p, uint64_t pos, const Verify& v) {
  json j{{"format", detail::kProgressFormat},
         {"layout_version", kLayoutVersion},
         {"planes", kPlanesNone},
         {"data_bytes", p.repacked.file_bytes()},
         {"done", pos},
         {"verify", {{"from", v.from}, {"to", v.to}, {"hash", v.hash}}}};
  detail::put_sources(j, p.fps);
  return j.dump(1) + "\n";
}

// The checkpoint's record of its last range; nullopt where it has none (a checkpoint from an older build) or one
// that does not end at `done`.
std::optional<Verify> parse_verify(const json& j, uint64_t done) {
  auto it = j.find("verify");
  if (it == j.end() || !it->is_object()) return std::nullopt;
  Verify v;
  try {
    v.from = it->at("from").get<uint64_t>();
    v.to = it->at("to").get<uint64_t>();
    v.hash = it->at("hash").get<std::string>();
  } catch (const json::exception&) {
    return std::nullopt;
  }
  if (v.to != done || v.from > v.to) return std::nullopt;
  return v;
}

// The job bytes of [from, to) read from the source again, hashed as the copy hashed them.
Result<std::string> hash_source_range(Joined& src, const Plan& plan, uint64_t from, uint64_t to) {
  detail::RangeHash h;
  DF_ASSIGN(io::AlignedBuffer buf, io::AlignedBuffer::allocate(kMaxWindow + io::kDirectAlignment));
  for (uint64_t b = from; b < to;) {
    const uint64_t e = std::min(to, b + kMaxWindow);
    uint8_t* d = buf.data() + b % io::kDirectAlignment;  // the file offset's phase: O_DIRECT reads land in place
    DF_TRY(src.read(b, d, e - b));
    plan.hash_window(h, b, e, d);
    b = e;
  }
  return h.text();
}

// Why the directory's previous contents cannot be reused without --force ("" when they can be reused or replaced).
std::string foreign_reason(const detail::StoreHeader& h, const Fingerprint& now, const std::string& what) {
  if (h.layout_version != kLayoutVersion || h.planes != kPlanesNone)
    return what + " of layout version " + std::to_string(h.layout_version) + " (planes \"" + h.planes +
           "\"), this build writes version " + std::to_string(kLayoutVersion) + " (planes \"" + kPlanesNone + "\")";
  const Fingerprint& was = h.sources.front();
  if (!same_location(was, now)) return what + " of " + was.location + ", not of " + now.location;
  return "";
}

// Headers of parts a split source no longer has (it was split in more parts, or not at all, when last ingested).
Status remove_other_headers(const fs::path& dir, size_t n_parts) {
  std::error_code ec;
  std::vector<std::string> stale;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!n.starts_with("header-") || !n.ends_with(".gguf")) continue;
    bool ours = false;
    for (size_t k = 1; k < n_parts; ++k) ours = ours || n == header_file(static_cast<uint32_t>(k));
    if (!ours) stale.push_back(e.path().string());
  }
  for (const std::string& p : stale) DF_TRY(detail::remove_durably(p));
  return {};
}

struct RunState {
  IngestResult* result;
  bool source_changed = false;
};

Status run_once(const IngestOptions& o, RunState& rs) {
  IngestResult& res = *rs.result;
  auto note = [&](const std::string& s) {
    if (o.on_note) o.on_note(s);
  };
  const fs::path dir(o.dir);
  const std::string data_path = (dir / kDataFile).string(), manifest_path = (dir / kManifestFile).string(),
                    progress_path = (dir / kProgressFile).string();

  bool changed_while_opening = false;
  auto opened_source = open_model_source(o.source, o.http, &changed_while_opening);
  if (!opened_source.ok()) {
    rs.source_changed = changed_while_opening;
    return opened_source.take_error();
  }
  ModelSource source = std::move(opened_source).value();
  DF_ASSIGN(Plan plan, make_plan(source, data_path));
  Joined src(source.parts, plan.bases);
  const Fingerprint& first_fp = plan.fps.front();

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error{o.dir + ": cannot create the store directory: " + ec.message()};
  DF_TRY(detail::refuse_links(o.dir));
  // One writer per directory; the kernel drops the lock with the process, however it ends.
  const std::string lock_path = (dir / kLockFile).string();
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (lock_fd < 0) return Error{detail::open_error(lock_path, "create", errno)};
  struct LockGuard {
    int fd;
    ~LockGuard() { ::close(fd); }
  } lock_guard{lock_fd};
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0)
    return Error{o.dir + ": another ingest is writing this store (" + lock_path + " is locked)"};

  // What is there already decides between nothing to do, resuming, and starting over.
  bool fresh = true;
  uint64_t start = plan.first;
  bool missing = false;
  auto manifest = detail::read_whole_file(manifest_path, &missing);
  if (manifest.ok()) {
    json j = json::parse(*manifest, nullptr, false);
    auto h = j.is_discarded() ? Result<detail::StoreHeader>(Error{manifest_path + ": not valid JSON"})
                              : detail::parse_store_header(j, manifest_path, detail::kManifestFormat);
    if (!h.ok() && !o.force)
      return Error{o.dir + ": holds an unreadable store (" + h.error().message + "); pass --force to replace it"};
    if (h.ok()) {
      std::string foreign = foreign_reason(*h, first_fp, "a store");
      if (!foreign.empty() && !o.force)
        return Error{o.dir + ": holds " + foreign + "; pass --force to replace it"};
      std::string change = describe_changes(h->sources, plan.fps);
      if (foreign.empty() && change.empty()) {
        // Complete and current only if Store::open agrees (a truncated data.bin or an edited manifest is not).
        auto opened = Store::open(o.dir);
        if (opened.ok()) {
          // Killed between writing the manifest and removing the checkpoint: the store is complete.
          DF_TRY(detail::remove_durably(progress_path));
          note(o.dir + " is complete and up to date with " + first_fp.location);
          res.up_to_date = true;
          res.data_bytes = plan.repacked.file_bytes();
          res.records = plan.records;
          return {};
        }
        note(opened.error().message + "; rebuilding");
      } else if (foreign.empty()) {
        note(first_fp.location + " changed since the store was made (" + change + "); rebuilding");
      }
    }
  } else if (!missing) {
    return manifest.take_error();
  } else {
    auto progress = detail::read_whole_file(progress_path, &missing);
    if (!progress.ok() && !missing) return progress.take_error();
    if (progress.ok()) {
      json j = json::parse(*progress, nullptr, false);
      auto h = j.is_discarded() ? Result<detail::StoreHeader>(Error{progress_path + ": not valid JSON"})
                                : detail::parse_store_header(j, progress_path, detail::kProgressFormat);
      if (!h.ok()) {
        note(h.error().message + "; starting over");
      } else {
        std::string foreign = foreign_reason(*h, first_fp, "an interrupted ingest");
        if (!foreign.empty() && !o.force)
          return Error{o.dir + ": holds " + foreign + "; refusing to resume it (pass --force to start over)"};
        std::string change = describe_changes(h->sources, plan.fps);
        auto done_it = j.find("done");
        uint64_t done = done_it != j.end() && done_it->is_number_unsigned() ? done_it->get<uint64_t>() : 0;
        struct stat st {};
        bool data_ok = ::lstat(data_path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
                       static_cast<uint64_t>(st.st_size) == h->data_bytes &&
                       h->data_bytes == plan.repacked.file_bytes();
        if (!foreign.empty()) {
          // --force: replace it.
        } else if (!change.empty()) {
          note(first_fp.location + " changed since the interrupted ingest (" + change + "); starting over");
        } else if (data_ok && done >= plan.first && done <= plan.end) {
          // Size, mtime, ETag and header agree; the bytes the last checkpoint covered must too. They are read again
          // (at most --checkpoint-every of them): a file swapped for another of the same size and mtime, or by a
          // server that sends no validators, differs there.
          const auto verify = parse_verify(j, done);
          std::string why_not;
          if (!verify) {
            why_not = "the checkpoint has no checksum of the bytes it covers (written by an older build)";
          } else {
            auto now = hash_source_range(src, plan, verify->from, verify->to);
            if (!now.ok() && !src.changed()) return now.take_error();
            if (!now.ok())
              why_not = first_fp.location + " changed since the interrupted ingest (" + now.error().message + ")";
            else if (*now != verify->hash)
              why_not = first_fp.location + " changed since the interrupted ingest: source bytes " +
                        std::to_string(verify->from) + ".." + std::to_string(verify->to) + " hash to " + *now +
                        ", the checkpoint says " + verify->hash;
          }
          if (why_not.empty()) {
            fresh = false;
            start = done;
            res.resumed = true;
            res.resumed_at = plan.done_at(done);
            note("resuming at " + format_size(res.resumed_at) + " of " + format_size(plan.total) + " (the last " +
                 format_size(plan.done_at(verify->to) - plan.done_at(verify->from)) +
                 " checkpointed read again: unchanged)");
          } else {
            note(why_not + "; starting over");
          }
        } else {
          note(o.dir + ": the interrupted ingest's data file does not match its checkpoint; starting over");
        }
      }
    }
  }

  DataFile data;
  if (fresh) {
    DF_TRY(detail::remove_durably(manifest_path));
    DF_TRY(detail::remove_durably(progress_path));
    for (size_t k = 0; k < plan.headers.size(); ++k)
      DF_TRY(detail::write_file_durably((dir / header_file(static_cast<uint32_t>(k))).string(), plan.headers[k]));
    DF_TRY(remove_other_headers(dir, plan.headers.size()));
    DF_TRY(data.open(data_path, plan.repacked.file_bytes(), true));
    const Verify nothing_yet{start, start, detail::RangeHash{}.text()};
    DF_TRY(detail::write_file_durably(progress_path, progress_text(plan, start, nothing_yet)));
  } else {
    DF_TRY(data.open(data_path, plan.repacked.file_bytes(), false));
  }

  uint64_t window = std::min<uint64_t>(kMaxWindow, std::max<uint64_t>(io::kDirectAlignment,
                                                                     io::align_down(o.checkpoint_every, io::kDirectAlignment)));
  if (o.limit_rate > 0)
    window = std::min(window, std::max<uint64_t>(io::kDirectAlignment, io::align_down(o.limit_rate / 16, io::kDirectAlignment)));
  // Two windows: the next one is read on another thread while this one is written (one read in flight at a time,
  // so the source is never used by two threads at once).
  io::AlignedBuffer bufs[2];
  for (auto& b : bufs) {
    DF_ASSIGN(b, io::AlignedBuffer::allocate(window + io::kDirectAlignment));
  }
  auto first_job_ending_after = [&](uint64_t p) { return plan.first_ending_after(p); };
  // The window starting at p, moved past padding between tensors.
  auto window_at = [&](uint64_t p) -> std::pair<uint64_t, uint64_t> {
    size_t k = first_job_ending_after(p);
    if (k < plan.jobs.size() && plan.jobs[k].src > p) p = plan.jobs[k].src;
    return {p, std::min(plan.end, io::align_down(p, window) + window)};
  };
  // Same phase as the file offset inside the buffer: O_DIRECT reads land in place.
  auto at = [&](int slot, uint64_t p) { return bufs[slot].data() + p % io::kDirectAlignment; };
  auto start_read = [&](uint64_t b, uint64_t e, int slot) {
    uint8_t* d = at(slot, b);
    return std::async(std::launch::async, [&src, b, e, d] { return src.read(b, d, e - b); });
  };

  const auto t0 = Clock::now();
  uint64_t pos = start, last_checkpoint = start, read_this_run = 0;
  detail::RangeHash since_checkpoint;  // the job bytes of [last_checkpoint, pos)
  auto report = [&](bool finished) {
    if (!o.on_progress) return;
    IngestProgress p;
    p.done = plan.done_at(pos);
    p.total = plan.total;
    p.this_run = p.done - res.resumed_at;
    p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    p.finished = finished;
    o.on_progress(p);
  };
  int slot = 0;
  auto [cb, ce] = window_at(pos);
  std::future<Status> cur;
  if (pos < plan.end) cur = start_read(cb, ce, slot);
  while (pos < plan.end) {
    Status st = cur.get();
    if (!st.ok()) {
      rs.source_changed = src.changed();
      return st;
    }
    uint64_t nb = plan.end, ne = plan.end;
    std::future<Status> next;  // a failed write below waits for it in its destructor
    if (ce < plan.end) {
      std::tie(nb, ne) = window_at(ce);
      next = start_read(nb, ne, 1 - slot);
    }
    const uint8_t* w = at(slot, cb);
    for (size_t k = first_job_ending_after(cb); k < plan.jobs.size() && plan.jobs[k].src < ce; ++k) {
      const Job& job = plan.jobs[k];
      uint64_t a = std::max(job.src, cb), b = std::min(job.src + job.len, ce);
      if (a < b) DF_TRY(data.write_at(job.dst + (a - job.src), w + (a - cb), b - a));
    }
    plan.hash_window(since_checkpoint, cb, ce, w);
    read_this_run += ce - cb;
    pos = ce;
    if (pos - last_checkpoint >= o.checkpoint_every && pos < plan.end) {
      DF_TRY(data.sync());  // the data first: a checkpoint never points past bytes that are not on disk
      DF_TRY(detail::write_file_durably(progress_path,
                                        progress_text(plan, pos, {last_checkpoint, pos, since_checkpoint.text()})));
      last_checkpoint = pos;
      since_checkpoint = {};
    }
    if (o.limit_rate > 0) {
      auto due = t0 + std::chrono::duration<double>(double(read_this_run) / double(o.limit_rate));
      std::this_thread::sleep_until(std::chrono::time_point_cast<Clock::duration>(due));
    }
    if (pos < plan.end) report(false);
    cur = std::move(next);
    slot = 1 - slot;
    cb = nb;
    ce = ne;
  }
  DF_TRY(data.sync());
  // Everything was read from the source as open() saw it; a file replaced meanwhile must not make a store.
  if (!src.still_same()) {
    rs.source_changed = true;
    return Error{first_fp.location + ": changed while it was being read"};
  }
  DF_TRY(detail::write_file_durably(manifest_path, detail::manifest_text(plan.fps, plan.repacked)));
  DF_TRY(detail::remove_durably(progress_path));
  res.copied = plan.done_at(pos) - res.resumed_at;
  res.data_bytes = plan.repacked.file_bytes();
  res.records = plan.records;
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  report(true);
  return {};
}

}  // namespace

Result<IngestResult> ingest(const IngestOptions& options) {
  if (options.checkpoint_every == 0) return Error{"ingest: checkpoint interval must be at least one byte"};
  IngestResult res;
  for (unsigned attempt = 0;; ++attempt) {
    RunState rs{&res};
    Status st = run_once(options, rs);
    if (st.ok()) return res;
    if (!rs.source_changed || attempt >= kMaxRestarts) return st.take_error();
    if (options.on_note) options.on_note(st.error().message + "; starting over");
    res = IngestResult{};
    res.restarts = attempt + 1;
  }
}

}  // namespace df::store
