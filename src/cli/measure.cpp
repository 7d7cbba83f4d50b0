// diskformer measure --path FILE [--record-bytes N] [--qd N] [--seconds S] [--json]: what the disk under FILE
// delivers to the read path: sequential MB/s with large O_DIRECT reads, random record reads per second and MB/s at
// several queue depths, O_DIRECT against buffered reads, io_uring against the pread pool. Each configuration runs for
// --seconds, --repeats times, configurations alternating within a repeat (shared machines are noisy); the median is
// reported with min and max.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "diskformer/cache/slot_pool.h"
#include "diskformer/io/reader.h"
#include "diskformer/util/size.h"
#ifdef DISKFORMER_HAVE_CUDA
#include "diskformer/cudart/devices.h"
#endif

namespace df::cli {
namespace {

using nlohmann::json;

// One Qwen3-30B-A3B expert in Q4_0: gate and up (768 x 2048 each) and down (2048 x 768), 18 bytes per 32 weights.
constexpr uint64_t kDefaultRecordBytes = 3ull * 768 * 2048 / 32 * 18;  // 2,654,208
constexpr uint64_t kDefaultSeqBlock = 8ull << 20;
constexpr unsigned kSeqQueueDepth = 4;
constexpr double kBar = 0.9;  // issue 6: random record reads >= 90% of sequential O_DIRECT bandwidth

enum class Pattern { kSequential, kRandom, kRandomUnaligned, kSlotPool };

const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::kSequential: return "sequential";
    case Pattern::kRandom: return "random";
    case Pattern::kRandomUnaligned: return "random_unaligned";
    case Pattern::kSlotPool: return "slot_pool";
  }
  return "?";
}

struct Config {
  Pattern pattern = Pattern::kRandom;
  io::Backend backend = io::Backend::kUring;
  bool direct = true;
  unsigned qd = 1;
  uint64_t bytes = 0;  // per read
};

struct Sample {
  double mb_per_s = 0, reads_per_s = 0;
  double file_fraction = 0;  // bytes read / file size: above 1 a buffered run re-reads pages it cached itself
  uint64_t p50_ns = 0, p99_ns = 0, max_ns = 0;
  bool direct_in_effect = false;
};

struct Series {
  Config config;
  std::vector<Sample> samples;
  bool direct_in_effect = true;  // every sample ran with O_DIRECT
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Drops FILE's pages from the page cache so that a buffered run starts cold (clean pages only; the file is read
// only here).
void drop_page_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Pinned host-to-GPU copy bandwidth (one 1 GiB copy, and the same bytes as record-sized copies), where a CUDA build
// finds a GPU; null otherwise, with the reason.
struct H2d {
  std::optional<double> one_copy_GBps, record_copies_GBps;
  std::string why_none;
};
H2d pinned_h2d(uint64_t record_bytes) {
  H2d out;
#ifdef DISKFORMER_HAVE_CUDA
  auto dev = cuda::query_devices();
  if (dev.count == 0) {
    out.why_none = "no GPU: " + dev.why_none;
    return out;
  }
  auto r = cuda::measure_pinned_h2d(1ull << 30, record_bytes);
  if (!r) {
    out.why_none = r.error().message;
    return out;
  }
  out.one_copy_GBps = r->one_copy_GBps;
  out.record_copies_GBps = r->record_copies_GBps;
#else
  (void)record_bytes;
  out.why_none = "no CUDA in this build";
#endif
  return out;
}

Result<Sample> run_one(const Config& c, const std::string& path, double seconds, uint64_t seed, io::AlignedBuffer& buffer) {
  if (!c.direct) drop_page_cache(path);
  DF_ASSIGN(auto reader, io::Reader::create({.backend = c.backend,
                                              .direct = c.direct ? io::Direct::kAuto : io::Direct::kOff,
                                              .queue_depth = c.qd}));
  DF_ASSIGN(io::FileId file, reader->open(path));
  const uint64_t size = reader->file(file).size;
  const uint64_t stride = io::align_up(c.bytes, io::kDirectAlignment) + io::kDirectAlignment;
  std::mt19937_64 rng(seed);
  uint64_t next_seq = 0;
  // Random records are the file cut into 4 KiB-aligned record slots (a repacked store's layout), visited in a
  // shuffled order, so that a run reads each record once before any twice: buffered runs then measure the disk,
  // not pages the run itself brought into the page cache.
  const uint64_t record_stride = io::align_up(c.bytes, io::kDirectAlignment);
  std::vector<uint32_t> order;
  if (c.pattern == Pattern::kRandom) {
    order.resize(std::max<uint64_t>(1, (size - c.bytes) / record_stride + 1));
    for (uint32_t i = 0; i < order.size(); i++) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
  }
  size_t next_record = 0;
  auto next_request = [&](uint64_t slot) {
    io::ReadRequest r{.file = file, .length = c.bytes, .user_data = slot};
    uint8_t* base = buffer.data() + slot * stride;
    if (c.pattern == Pattern::kSequential) {
      if (next_seq >= size) next_seq = 0;
      r.offset = next_seq;
      r.length = std::min(c.bytes, size - next_seq);
      next_seq += r.length;
    } else if (c.pattern == Pattern::kRandom) {
      r.offset = uint64_t(order[next_record++ % order.size()]) * record_stride;
    } else {
      // Records in place in a GGUF: any offset. The buffer takes the offset's phase, as a slot pool's locator can
      // arrange, so only the partial edge blocks go through bounce buffers.
      r.offset = rng() % (size - c.bytes + 1);
      base += r.offset % io::kDirectAlignment;
    }
    r.dst = base;
    return r;
  };

  using clock = std::chrono::steady_clock;
  std::vector<io::ReadRequest> batch;
  for (unsigned i = 0; i < c.qd; i++) batch.push_back(next_request(i));
  auto t0 = clock::now();
  auto deadline = t0 + std::chrono::duration<double>(seconds);
  reader->submit(batch);
  std::vector<io::Completion> done;
  uint64_t reads = 0, bytes = 0;
  std::optional<Error> failure;
  while (reader->in_flight() > 0) {
    done.clear();
    reader->poll(done, 1);
    bool more = clock::now() < deadline && !failure;
    batch.clear();
    for (auto& d : done) {
      if (!d.status.ok()) {
        if (!failure) failure = d.status.take_error();
        continue;
      }
      reads++;
      if (more) batch.push_back(next_request(d.user_data));
    }
    if (!batch.empty()) reader->submit(batch);
  }
  double elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  if (failure) return *failure;
  bytes = reader->stats().bytes;
  Sample s;
  s.mb_per_s = double(bytes) / elapsed / 1e6;
  s.reads_per_s = double(reads) / elapsed;
  s.file_fraction = double(bytes) / double(size);
  s.p50_ns = reader->stats().latency.percentile_ns(0.5);
  s.p99_ns = reader->stats().latency.percentile_ns(0.99);
  s.max_ns = reader->stats().latency.max_ns();
  s.direct_in_effect = reader->file(file).direct;
  return s;
}

// The same random records through a HostSlotPool used the way an engine uses it: prefetch the next qd records (the
// guesses), then get() the current one. Measures what the cache machinery keeps of the disk's random-read rate.
Result<Sample> run_pool(const Config& c, const std::string& path, double seconds, uint64_t seed) {
  DF_ASSIGN(auto reader, io::Reader::create({.backend = c.backend, .direct = io::Direct::kAuto, .queue_depth = c.qd}));
  DF_ASSIGN(io::FileId file, reader->open(path));
  const uint64_t size = reader->file(file).size;
  const uint64_t record_stride = io::align_up(c.bytes, io::kDirectAlignment);
  std::vector<uint32_t> order(std::max<uint64_t>(1, (size - c.bytes) / record_stride + 1));
  for (uint32_t i = 0; i < order.size(); i++) order[i] = i;
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  const uint64_t bytes = c.bytes;
  cache::Locator locate = [file, record_stride, bytes](cache::Key k, std::vector<cache::Extent>& out) {
    out.push_back({.file = file, .offset = k * record_stride, .length = bytes});
    return Status::Ok();
  };
  DF_ASSIGN(auto pool, cache::HostSlotPool::create(std::move(reader), locate,
                                                   {.slots = 2 * c.qd + 1, .slot_bytes = c.bytes, .max_prefetch = c.qd}));
  auto key_at = [&](uint64_t i) { return cache::Key(order[i % order.size()]); };
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  auto deadline = t0 + std::chrono::duration<double>(seconds);
  std::vector<cache::Key> window(c.qd);
  uint64_t used = 0;
  while (clock::now() < deadline) {
    for (unsigned j = 0; j < c.qd; j++) window[j] = key_at(used + 1 + j);
    pool->prefetch(window);
    DF_ASSIGN(auto handle, pool->get(key_at(used)));
    used++;
  }
  double elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  Sample s;
  s.mb_per_s = double(used * c.bytes) / elapsed / 1e6;
  s.reads_per_s = double(used) / elapsed;
  s.file_fraction = double(used * c.bytes) / double(size);
  const io::IoStats& st = pool->reader().stats();
  s.p50_ns = st.latency.percentile_ns(0.5);
  s.p99_ns = st.latency.percentile_ns(0.99);
  s.max_ns = st.latency.max_ns();
  s.direct_in_effect = pool->reader().file(file).direct;
  pool->wait_prefetches();
  return s;
}

json stat_json(const std::vector<double>& v) {
  return {{"median", median(v)}, {"min", *std::min_element(v.begin(), v.end())},
          {"max", *std::max_element(v.begin(), v.end())}};
}

std::vector<double> field(const Series& s, double Sample::*f) {
  std::vector<double> v;
  for (const auto& x : s.samples) v.push_back(x.*f);
  return v;
}

std::vector<double> latency_us(const Series& s, uint64_t Sample::*f) {
  std::vector<double> v;
  for (const auto& x : s.samples) v.push_back(double(x.*f) / 1e3);
  return v;
}

struct Verdict {
  const Series* seq = nullptr;
  const Series* random = nullptr;
};

// The bar compares the best random O_DIRECT configuration at the record size with the best sequential O_DIRECT one.
Verdict verdict(const std::vector<Series>& all) {
  Verdict v;
  double best_seq = -1, best_rand = -1;
  for (const auto& s : all) {
    if (!s.config.direct || !s.direct_in_effect) continue;
    double m = median(field(s, &Sample::mb_per_s));
    if (s.config.pattern == Pattern::kSequential && m > best_seq) best_seq = m, v.seq = &s;
    if (s.config.pattern == Pattern::kRandom && m > best_rand) best_rand = m, v.random = &s;
  }
  return v;
}

json to_json(const std::string& path, uint64_t size, uint64_t record_bytes, double seconds, int repeats,
             bool uring_available, const std::string& uring_error, const std::vector<Series>& all) {
  json j;
  j["path"] = path;
  j["file_bytes"] = size;
  j["record_bytes"] = record_bytes;
  j["seconds_per_run"] = seconds;
  j["repeats"] = repeats;
  j["alignment"] = io::kDirectAlignment;
  j["io_uring_available"] = uring_available;
  j["io_uring_error"] = uring_available ? json(nullptr) : json(uring_error);
  j["page_cache"] =
      "O_DIRECT runs bypass it; buffered runs start after POSIX_FADV_DONTNEED on the file, and random runs read each "
      "record once until file_fraction_read passes 1";
  json runs = json::array();
  for (const auto& s : all) {
    json r;
    r["pattern"] = pattern_name(s.config.pattern);
    r["backend"] = io::backend_name(s.config.backend);
    r["direct"] = s.direct_in_effect;
    r["direct_requested"] = s.config.direct;
    r["qd"] = s.config.qd;
    r["read_bytes"] = s.config.bytes;
    r["MBps"] = stat_json(field(s, &Sample::mb_per_s));
    r["reads_per_s"] = stat_json(field(s, &Sample::reads_per_s));
    r["file_fraction_read"] = median(field(s, &Sample::file_fraction));
    r["latency_p50_us"] = median(latency_us(s, &Sample::p50_ns));
    r["latency_p99_us"] = median(latency_us(s, &Sample::p99_ns));
    auto lat_max = latency_us(s, &Sample::max_ns);
    r["latency_max_us"] = *std::max_element(lat_max.begin(), lat_max.end());
    runs.push_back(r);
  }
  j["runs"] = runs;
  Verdict v = verdict(all);
  json bar;
  bar["target_ratio"] = kBar;
  if (v.seq && v.random) {
    double seq = median(field(*v.seq, &Sample::mb_per_s)), rnd = median(field(*v.random, &Sample::mb_per_s));
    bar["sequential_MBps"] = seq;
    bar["sequential_backend"] = io::backend_name(v.seq->config.backend);
    bar["random_MBps"] = rnd;
    bar["random_backend"] = io::backend_name(v.random->config.backend);
    bar["random_qd"] = v.random->config.qd;
    bar["ratio"] = rnd / seq;
    bar["pass"] = rnd >= kBar * seq;
  } else {
    bar["ratio"] = nullptr;  // no O_DIRECT runs: the filesystem refused it
    bar["pass"] = nullptr;
  }
  j["bar"] = bar;
  auto h2d = pinned_h2d(record_bytes);
  j["pinned_h2d_GBps"] = h2d.one_copy_GBps ? json(*h2d.one_copy_GBps) : json(nullptr);
  j["pinned_h2d_records_GBps"] = h2d.record_copies_GBps ? json(*h2d.record_copies_GBps) : json(nullptr);
  j["pinned_h2d_note"] = h2d.why_none.empty() ? json(nullptr) : json(h2d.why_none);
  return j;
}

void print_table(const json& j) {
  std::printf("file %s: %s, record %s, %d repeats of %.1f s per configuration (median [min..max])\n",
              j["path"].get<std::string>().c_str(), format_size(j["file_bytes"].get<uint64_t>()).c_str(),
              format_size(j["record_bytes"].get<uint64_t>()).c_str(), j["repeats"].get<int>(),
              j["seconds_per_run"].get<double>());
  if (!j["io_uring_available"].get<bool>())
    std::printf("io_uring unavailable (%s): pread pool only\n", j["io_uring_error"].get<std::string>().c_str());
  std::printf("%-17s %-8s %-8s %4s %10s %28s %12s %9s %9s %6s\n", "pattern", "backend", "O_DIRECT", "qd", "read",
              "MB/s", "reads/s", "p50 us", "p99 us", "file");
  for (const auto& r : j["runs"]) {
    char mb[64];
    std::snprintf(mb, sizeof mb, "%.0f [%.0f..%.0f]", r["MBps"]["median"].get<double>(),
                  r["MBps"]["min"].get<double>(), r["MBps"]["max"].get<double>());
    std::string direct = r["direct"].get<bool>() ? "yes" : (r["direct_requested"].get<bool>() ? "refused" : "no");
    std::printf("%-17s %-8s %-8s %4u %10s %28s %12.1f %9.0f %9.0f %5.0f%%\n", r["pattern"].get<std::string>().c_str(),
                r["backend"].get<std::string>().c_str(), direct.c_str(), r["qd"].get<unsigned>(),
                format_size(r["read_bytes"].get<uint64_t>()).c_str(), mb, r["reads_per_s"]["median"].get<double>(),
                r["latency_p50_us"].get<double>(), r["latency_p99_us"].get<double>(),
                100 * r["file_fraction_read"].get<double>());
  }
  const json& bar = j["bar"];
  if (bar["ratio"].is_null()) {
    std::printf("bar: no O_DIRECT runs (the filesystem refused O_DIRECT)\n");
  } else {
    std::printf("bar: random %.0f MB/s (%s, qd %u) / sequential %.0f MB/s (%s) = %.1f%% (target %.0f%%): %s\n",
                bar["random_MBps"].get<double>(), bar["random_backend"].get<std::string>().c_str(),
                bar["random_qd"].get<unsigned>(), bar["sequential_MBps"].get<double>(),
                bar["sequential_backend"].get<std::string>().c_str(), 100 * bar["ratio"].get<double>(), 100 * kBar,
                bar["pass"].get<bool>() ? "pass" : "FAIL");
  }
  if (j["pinned_h2d_GBps"].is_null())
    std::printf("pinned host-to-GPU: n/a (%s)\n", j["pinned_h2d_note"].get<std::string>().c_str());
  else
    std::printf("pinned host-to-GPU: %.1f GB/s one 1 GiB copy, %.1f GB/s as record-sized copies\n",
                j["pinned_h2d_GBps"].get<double>(), j["pinned_h2d_records_GBps"].get<double>());
}

}  // namespace

int cmd_measure(int argc, char** argv) {
  Args args("measure", "--path FILE [--record-bytes N] [--qd N] [--seconds S] [--json]");
  args.option("--path", "FILE", "file to read (2 GB or more gives steadier numbers); it is only read");
  args.option("--record-bytes", "SIZE", "bytes per random read (default 2654208: one Qwen3-30B-A3B Q4_0 expert)");
  args.option("--qd", "N", "random reads in flight (default: 1, 4, 16 and 64)");
  args.option("--seconds", "S", "seconds per configuration and repeat (default 1)");
  args.option("--repeats", "N", "alternating repeats; the median is reported (default 3)");
  args.option("--seq-block", "SIZE", "bytes per sequential read (default 8M, 4 in flight)");
  args.option("--backend", "B", "io_uring, pread or both (default both)");
  args.flag("--no-buffered", "skip the buffered (page cache) runs");
  args.flag("--json", "one JSON object on stdout instead of a table");
  if (!args.parse(argc, argv)) return args.exit_code();
  auto path = args.get("--path");
  if (!path) return args.usage_error("--path FILE is required");
  auto record = args.get_size("--record-bytes");
  auto seq_block = args.get_size("--seq-block");
  auto qd_opt = args.get_int("--qd", 0, 1, 4096);  // 0 (absent): the default series
  auto seconds = args.get_double("--seconds", 1.0, 0, 86400);
  auto repeats = args.get_int("--repeats", 3, 1, 1000);
  if (!record || !seq_block || !qd_opt || !seconds || !repeats) return args.exit_code();
  uint64_t record_bytes = record->value_or(kDefaultRecordBytes);
  uint64_t block = seq_block->value_or(kDefaultSeqBlock);
  if (record_bytes == 0 || block == 0) return args.usage_error("--record-bytes and --seq-block must be positive");
  if (*seconds <= 0)
    return args.usage_error("option --seconds expects a positive number, got " + *args.get("--seconds"));
  std::string backend_arg = args.get_or("--backend", "both");
  std::vector<io::Backend> backends;
  if (backend_arg == "both" || backend_arg == "io_uring") backends.push_back(io::Backend::kUring);
  if (backend_arg == "both" || backend_arg == "pread") backends.push_back(io::Backend::kPread);
  if (backends.empty()) return args.usage_error("--backend must be io_uring, pread or both");

  // The file must hold a record; a probe reader also says whether io_uring works here.
  auto probe = io::Reader::create({.backend = io::Backend::kPread});
  if (!probe.ok()) {
    std::fprintf(stderr, "diskformer measure: %s\n", probe.error().message.c_str());
    return 1;
  }
  auto fid = (*probe)->open(*path);
  if (!fid.ok()) {
    std::fprintf(stderr, "diskformer measure: %s\n", fid.error().message.c_str());
    return 1;
  }
  uint64_t size = (*probe)->file(*fid).size;
  if (size < record_bytes || size < io::kDirectAlignment) {
    std::fprintf(stderr, "diskformer measure: %s is %llu bytes, smaller than one record of %llu bytes\n", path->c_str(),
                 (unsigned long long)size, (unsigned long long)record_bytes);
    return 1;
  }
  auto uring = io::Reader::create({.backend = io::Backend::kUring, .queue_depth = 1});
  bool uring_ok = uring.ok();
  std::string uring_error = uring_ok ? "" : uring.error().message;
  if (!uring_ok) std::erase(backends, io::Backend::kUring);
  if (backends.empty()) {
    std::fprintf(stderr, "diskformer measure: %s\n", uring_error.c_str());
    return 1;
  }

  std::vector<unsigned> qds = *qd_opt > 0 ? std::vector<unsigned>{unsigned(*qd_opt)} : std::vector<unsigned>{1, 4, 16, 64};
  std::vector<Series> all;
  auto add = [&](Pattern p, io::Backend b, bool direct, unsigned qd, uint64_t bytes) {
    all.push_back(Series{Config{p, b, direct, qd, bytes}, {}, true});
  };
  const bool buffered = !args.has("--no-buffered");
  for (io::Backend b : backends) {
    add(Pattern::kSequential, b, true, kSeqQueueDepth, block);
    if (buffered) add(Pattern::kSequential, b, false, kSeqQueueDepth, block);
  }
  for (io::Backend b : backends)
    for (unsigned qd : qds) {
      add(Pattern::kRandom, b, true, qd, record_bytes);
      if (buffered) add(Pattern::kRandom, b, false, qd, record_bytes);
    }
  for (io::Backend b : backends) add(Pattern::kRandomUnaligned, b, true, qds.back(), record_bytes);
  for (io::Backend b : backends) add(Pattern::kSlotPool, b, true, qds.back(), record_bytes);

  uint64_t stride = io::align_up(record_bytes, io::kDirectAlignment) + io::kDirectAlignment;
  uint64_t buffer_bytes = std::max(stride * qds.back(), (io::align_up(block, io::kDirectAlignment) + io::kDirectAlignment) * kSeqQueueDepth);
  for (unsigned q : qds) buffer_bytes = std::max(buffer_bytes, stride * q);
  auto buffer = io::AlignedBuffer::allocate(buffer_bytes);
  if (!buffer.ok()) {
    std::fprintf(stderr, "diskformer measure: %s\n", buffer.error().message.c_str());
    return 1;
  }
  const bool json_out = args.has("--json");
  for (int rep = 0; rep < *repeats; rep++) {
    for (size_t i = 0; i < all.size(); i++) {
      Series& s = all[i];
      uint64_t seed = uint64_t(rep) * 1000 + i;
      auto sample = s.config.pattern == Pattern::kSlotPool ? run_pool(s.config, *path, *seconds, seed)
                                                           : run_one(s.config, *path, *seconds, seed, *buffer);
      if (!sample.ok()) {
        std::fprintf(stderr, "diskformer measure: %s %s: %s\n", pattern_name(s.config.pattern),
                     io::backend_name(s.config.backend), sample.error().message.c_str());
        return 1;
      }
      s.direct_in_effect = s.direct_in_effect && sample->direct_in_effect;
      s.samples.push_back(*sample);
      if (!json_out)
        std::fprintf(stderr, "repeat %d/%d: %-17s %-8s direct=%d qd=%-3u %8.0f MB/s\n", rep + 1, int(*repeats),
                     pattern_name(s.config.pattern), io::backend_name(s.config.backend), int(sample->direct_in_effect),
                     s.config.qd, sample->mb_per_s);
    }
  }
  json j = to_json(*path, size, record_bytes, *seconds, int(*repeats), uring_ok, uring_error, all);
  if (json_out) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    print_table(j);
  }
  return 0;
}

}  // namespace df::cli
