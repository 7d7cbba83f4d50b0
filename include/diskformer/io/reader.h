// Batched reads of byte ranges into caller buffers: requests go in with submit(), completions come out of poll()
// (the shape of RocksDB's FSRandomAccessFile::MultiRead and liburing's io_uring-cp loop).
//
// Two implementations behind one interface, chosen at run time:
//   - io_uring (liburing) with O_DIRECT; registered buffers for memory the caller registers;
//   - a pool of threads calling pread(2), used where io_uring cannot be set up (seccomp, gVisor, old kernels) or
//     when forced. Both use O_DIRECT where the filesystem accepts it and buffered reads where it refuses (tmpfs on
//     older kernels, some network filesystems), per file.
//
// Any byte range may be asked for. With O_DIRECT a range is read through its covering 4 KiB-aligned span: directly
// into the caller's buffer where the buffer's address has the same phase as the file offset (addr % 4096 ==
// offset % 4096), through an aligned bounce buffer otherwise (and for a partial first or last block). The caller
// gets exactly its bytes. Short reads are resumed, EAGAIN and EINTR retried, and every failure is a Completion whose
// error names the file, the offset and the length.
//
// Thread-safety: a Reader belongs to one thread, which calls open/submit/poll; the pool's threads and the kernel work
// underneath. stats() is also for that thread. Buffers must stay valid until their completion is polled.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "diskformer/io/buffer.h"
#include "diskformer/io/stats.h"
#include "diskformer/util/result.h"

namespace df::io {

enum class Backend {
  kAuto,   // io_uring where it can be set up, the pread pool otherwise
  kUring,  // io_uring or an error from create()
  kPread,  // the pread pool
};
const char* backend_name(Backend b);  // "auto", "io_uring", "pread"

enum class Direct {
  kAuto,     // O_DIRECT where the filesystem accepts it, buffered reads where it refuses
  kOff,      // buffered reads through the page cache
  kRequire,  // O_DIRECT or an error from open()
};

struct ReaderOptions {
  Backend backend = Backend::kAuto;
  Direct direct = Direct::kAuto;
  unsigned queue_depth = 64;  // device reads in flight at most; more requests wait inside the reader
  unsigned threads = 0;       // pread pool threads; 0 = min(queue_depth, 64)
  // How files are opened, as open(2). Tests replace it to play a filesystem that refuses O_DIRECT (EINVAL).
  std::function<int(const char* path, int flags)> open_file;
};

using FileId = uint32_t;

// One range of one file into one caller buffer. [offset, offset + length) must lie inside the file.
struct ReadRequest {
  FileId file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  void* dst = nullptr;     // length writable bytes
  uint64_t user_data = 0;  // handed back in the completion
};

struct Completion {
  uint64_t user_data = 0;
  Status status;  // ok, or why: "read failed: FILE offset 123 length 456: Input/output error"
};

// The covering aligned span of [offset, offset + length): what O_DIRECT reads for that range.
struct AlignedSpan {
  uint64_t offset = 0;  // aligned down
  uint64_t length = 0;  // aligned up, so the span covers the range
  uint64_t head = 0;    // offset - span.offset: where the range starts inside the span
};
AlignedSpan covering_span(uint64_t offset, uint64_t length, uint64_t alignment = kDirectAlignment);

struct FileInfo {
  std::string path;
  uint64_t size = 0;
  bool direct = false;  // reads of this file bypass the page cache
};

class Reader {
 public:
  // Falls back from io_uring to the pread pool under Backend::kAuto; kUring fails with the reason instead.
  static Result<std::unique_ptr<Reader>> create(const ReaderOptions& options = {});
  virtual ~Reader() = default;

  Backend backend() const { return backend_; }  // kUring or kPread, never kAuto
  const ReaderOptions& options() const { return options_; }

  // Opens a file for reading; the error names the path. The size is taken once, at open.
  virtual Result<FileId> open(const std::string& path) = 0;
  virtual const FileInfo& file(FileId id) const = 0;

  // Queues the requests; never blocks and never fails: a bad request (unknown file, range past the end, null
  // buffer) completes with an error at the next poll().
  virtual void submit(std::span<const ReadRequest> requests) = 0;
  // Appends finished requests to out (in completion order). Blocks until at least min(wait_for, in_flight())
  // requests have finished; wait_for = 0 only collects what has already finished. Returns how many it appended.
  virtual size_t poll(std::vector<Completion>& out, size_t wait_for) = 0;
  // Requests submitted and not yet returned by poll().
  virtual size_t in_flight() const = 0;

  // Reads that target [base, base + bytes) may use the kernel's pre-mapped buffer path (io_uring's registered
  // buffers). A hint: returns false where it does not apply (pread pool) or the kernel refused (memlock limit).
  // Register before submitting into the region; the region must outlive the reader or unregister_memory().
  virtual bool register_memory(void* base, size_t bytes) { return false; }
  virtual void unregister_memory() {}

  // Synchronous conveniences on top of submit/poll, for a reader with nothing else in flight (checked).
  Status read(FileId file, uint64_t offset, uint64_t length, void* dst);
  Status read_batch(std::span<const ReadRequest> requests);  // the first error, after all have finished

  const IoStats& stats() const { return stats_; }
  void reset_stats() { stats_ = IoStats{}; }

 protected:
  Reader(Backend backend, ReaderOptions options) : backend_(backend), options_(std::move(options)) {}
  Backend backend_;
  ReaderOptions options_;
  IoStats stats_;
};

}  // namespace df::io
