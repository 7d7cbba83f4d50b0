#include "io/reader_core.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "diskformer/util/check.h"

namespace df::io::detail {
namespace {

constexpr uint64_t A = kDirectAlignment;
// Requests are cut into pieces of at most this many bytes: it bounds a bounce buffer, keeps every call under
// read(2)'s 2 GiB limit, and lets the pread pool spread one large request over several threads.
constexpr uint64_t kMaxPiece = 16ull << 20;
// Pieces that go through a bounce buffer are cut smaller, so that a full queue holds at most queue_depth MiB of them.
constexpr uint64_t kMaxBouncedPiece = 1ull << 20;
constexpr unsigned kMaxRetries = 1000;  // EAGAIN / EINTR in a row on one op before it counts as a failure

std::string range_text(const OpenFile& f, uint64_t offset, uint64_t length) {
  return f.info.path + " offset " + std::to_string(offset) + " length " + std::to_string(length);
}

int default_open(const char* path, int flags) { return ::open(path, flags); }

}  // namespace

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

ReaderCore::ReaderCore(Backend backend, ReaderOptions options) : Reader(backend, std::move(options)) {
  if (!options_.open_file) options_.open_file = default_open;
  if (options_.queue_depth == 0) options_.queue_depth = 1;
}

ReaderCore::~ReaderCore() {
  DF_CHECK(device_in_flight_ == 0);
  for (auto& f : files_) {
    if (f.fd_direct >= 0) ::close(f.fd_direct);
    if (f.fd_buffered >= 0) ::close(f.fd_buffered);
  }
  for (Op* op : waiting_) delete op;
}

Result<FileId> ReaderCore::open(const std::string& path) {
  OpenFile f;
  f.info.path = path;
  f.fd_buffered = options_.open_file(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_buffered < 0) return Error{"cannot open " + path + ": " + std::strerror(errno)};
  off_t end = ::lseek(f.fd_buffered, 0, SEEK_END);  // lseek, not st_size, so that block devices work too
  if (end < 0) {
    int e = errno;
    ::close(f.fd_buffered);
    return Error{"cannot size " + path + ": " + std::strerror(e)};
  }
  f.info.size = uint64_t(end);
  if (options_.direct != Direct::kOff) {
    f.fd_direct = options_.open_file(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (f.fd_direct < 0 && options_.direct == Direct::kRequire) {
      int e = errno;
      ::close(f.fd_buffered);
      return Error{"O_DIRECT refused for " + path + ": " + std::strerror(e)};
    }
  }
  f.info.direct = f.fd_direct >= 0;
  files_.push_back(std::move(f));
  return FileId(files_.size() - 1);
}

const FileInfo& ReaderCore::file(FileId id) const {
  DF_CHECK(id < files_.size());
  return files_[id].info;
}

void ReaderCore::submit(std::span<const ReadRequest> requests) {
  uint64_t t = now_ns();
  for (const ReadRequest& r : requests) {
    std::unique_ptr<Task> owned;
    if (!task_free_.empty()) {
      owned = std::move(task_free_.back());
      task_free_.pop_back();
    } else {
      owned = std::make_unique<Task>();
    }
    Task* task = owned.release();
    task->request = r;
    task->ops_left = 0;
    task->status = Status::Ok();
    task->submit_ns = t;
    tasks_in_flight_++;
    plan(task);
  }
  pump();
}

void ReaderCore::plan(Task* task) {
  const ReadRequest& r = task->request;
  if (r.file >= files_.size()) {
    fail_task(task, Error{"read of unknown file id " + std::to_string(r.file)});
    return;
  }
  const OpenFile& f = files_[r.file];
  if (r.offset > f.info.size || r.length > f.info.size - r.offset) {
    fail_task(task, Error{"read past the end: " + range_text(f, r.offset, r.length) + " (file size " +
                          std::to_string(f.info.size) + ")"});
    return;
  }
  if (r.length > 0 && r.dst == nullptr) {
    fail_task(task, Error{"read into a null buffer: " + range_text(f, r.offset, r.length)});
    return;
  }
  // ops_left is raised as ops are made and the task finishes when it drops to zero; the extra count held while
  // planning also finishes a request of length zero, which has no ops.
  task->ops_left = 1;
  uint8_t* dst = static_cast<uint8_t*>(r.dst);
  const bool direct = f.info.direct;
  // The phase of the caller's buffer against the file is the same for every piece of the request.
  const bool same_phase = (reinterpret_cast<uintptr_t>(dst) - r.offset) % A == 0;
  const uint64_t piece = !direct || same_phase ? kMaxPiece : kMaxBouncedPiece;
  for (uint64_t pos = r.offset, end = r.offset + r.length; pos < end;) {
    // Cut at multiples of the piece size in the file so that pieces of a direct read stay aligned.
    uint64_t piece_end = std::min(end, align_down(pos, piece) + piece);
    uint64_t n = piece_end - pos;
    uint8_t* out = dst + (pos - r.offset);
    if (!direct) {
      new_op(task, f, false, pos, n, n)->buf = out;
    } else if (same_phase) {
      // Same phase: whole blocks go straight into the caller's buffer, partial edge blocks through a bounce.
      uint64_t mid_begin = align_up(pos, A), mid_end = align_down(piece_end, A);
      if (mid_begin >= mid_end) {
        AlignedSpan s = covering_span(pos, n, A);
        add_bounced(task, f, s.offset, s.length, s.head, n, out);
      } else {
        if (pos < mid_begin) add_bounced(task, f, mid_begin - A, A, A - (mid_begin - pos), mid_begin - pos, out);
        new_op(task, f, true, mid_begin, mid_end - mid_begin, mid_end - mid_begin)->buf = out + (mid_begin - pos);
        if (mid_end < piece_end) add_bounced(task, f, mid_end, A, 0, piece_end - mid_end, out + (mid_end - pos));
      }
    } else {
      AlignedSpan s = covering_span(pos, n, A);
      add_bounced(task, f, s.offset, s.length, s.head, n, out);
    }
    pos = piece_end;
  }
  if (--task->ops_left == 0) finish_task(task);
}

Op* ReaderCore::new_op(Task* task, const OpenFile& f, bool direct, uint64_t offset, uint64_t length,
                       uint64_t need) {
  std::unique_ptr<Op> owned;
  if (!op_free_.empty()) {
    owned = std::move(op_free_.back());
    op_free_.pop_back();
  } else {
    owned = std::make_unique<Op>();
  }
  Op* op = owned.release();
  op->task = task;
  op->file = task->request.file;
  op->direct = direct;
  op->fd = direct ? f.fd_direct : f.fd_buffered;
  op->offset = offset;
  op->length = length;
  op->need = need;
  op->done = 0;
  op->buf = nullptr;
  op->copy_from = op->copy_len = 0;
  op->copy_to = nullptr;
  op->bounce_bytes = 0;
  op->retries = 0;
  task->ops_left++;
  waiting_.push_back(op);
  return op;
}

void ReaderCore::add_bounced(Task* task, const OpenFile& f, uint64_t span_offset, uint64_t span_length,
                             uint64_t copy_from, uint64_t copy_len, uint8_t* copy_to) {
  // The span may run past the end of the file; only the bytes the copy needs must arrive. The bounce buffer is
  // taken when the op starts, so a large request holds at most queue_depth of them at a time.
  Op* op = new_op(task, f, true, span_offset, span_length, copy_from + copy_len);
  op->bounce_bytes = span_length;
  op->copy_from = copy_from;
  op->copy_len = copy_len;
  op->copy_to = copy_to;
}

void ReaderCore::pump() {
  bool started = false;
  while (!waiting_.empty() && device_in_flight_ < options_.queue_depth) {
    Op* op = waiting_.front();
    waiting_.pop_front();
    if (op->bounce_bytes > 0 && op->bounce.empty()) {
      auto bounce = take_bounce(op->bounce_bytes);
      if (!bounce.ok()) {
        const OpenFile& f = files_[op->file];
        fail_task(op->task, Error{"read failed: " + range_text(f, op->offset, op->length) + ": " +
                                  bounce.error().message});
        finish_op(op);
        continue;
      }
      op->bounce = std::move(bounce).value();
      op->buf = op->bounce.data();
    }
    if (op->direct && !files_[op->file].info.direct) {  // planned before the file fell back to buffered reads
      op->direct = false;
      op->fd = files_[op->file].fd_buffered;
    }
    device_in_flight_++;
    stats_.device_reads++;
    start(op);
    started = true;
  }
  if (started) flush();
}

void ReaderCore::device_done(Op* op, int64_t res) {
  DF_CHECK(device_in_flight_ > 0);
  device_in_flight_--;
  OpenFile& f = files_[op->file];
  if (res == -EAGAIN || res == -EINTR) {
    if (++op->retries <= kMaxRetries) {
      stats_.retries++;
      waiting_.push_front(op);
      return;
    }
  }
  if (res == -EINVAL && op->direct) {
    // The filesystem took O_DIRECT at open but refuses it on reads: read this file through the page cache from now
    // on. Buffered reads accept the aligned spans and buffers already planned, so the op itself can stay.
    // fd_direct stays open: other ops may still hold it, and they fall back the same way.
    if (f.info.direct) {
      f.info.direct = false;
      stats_.direct_fallbacks++;
    }
    op->direct = false;
    op->fd = f.fd_buffered;
    waiting_.push_front(op);
    return;
  }
  if (res < 0) {
    std::string why = std::strerror(int(-res));
    fail_task(op->task, Error{"read failed: " + range_text(f, op->cur_offset(), op->cur_length()) + ": " + why});
    finish_op(op);
    return;
  }
  op->retries = 0;
  op->done += uint64_t(res);
  stats_.device_bytes += uint64_t(res);
  if (op->done >= op->need) {
    finish_op(op);
    return;
  }
  if (res == 0) {
    fail_task(op->task, Error{"read failed: " + range_text(f, op->cur_offset(), op->need - op->done) +
                              ": file ended early (truncated since it was opened?)"});
    finish_op(op);
    return;
  }
  stats_.short_reads++;
  if (op->direct && op->done % A != 0) {
    // A short direct read that stopped inside a block: O_DIRECT cannot resume there, the page cache can.
    op->direct = false;
    op->fd = f.fd_buffered;
  }
  waiting_.push_front(op);
}

void ReaderCore::finish_op(Op* op) {
  Task* task = op->task;
  if (!op->bounce.empty()) {
    if (task->status.ok()) {  // a failed task's bytes are not the caller's to see
      std::memcpy(op->copy_to, op->bounce.data() + op->copy_from, op->copy_len);
      stats_.bounced_bytes += op->copy_len;
    }
    give_bounce(std::move(op->bounce));
  }
  op_free_.emplace_back(op);
  DF_CHECK(task->ops_left > 0);
  if (--task->ops_left == 0) finish_task(task);
}

void ReaderCore::fail_task(Task* task, Error error) {
  if (task->status.ok()) task->status = std::move(error);
  if (task->ops_left == 0) finish_task(task);  // failed before any op was planned
}

void ReaderCore::finish_task(Task* task) {
  stats_.requests++;
  if (task->status.ok()) {
    stats_.bytes += task->request.length;
  } else {
    stats_.failed++;
  }
  stats_.latency.add(now_ns() - task->submit_ns);
  ready_.push_back(Completion{task->request.user_data, std::move(task->status)});
  task_free_.emplace_back(task);
}

size_t ReaderCore::poll(std::vector<Completion>& out, size_t wait_for) {
  size_t target = std::min(wait_for, tasks_in_flight_);
  size_t got = 0;
  auto drain_ready = [&] {
    for (auto& c : ready_) out.push_back(std::move(c));
    got += ready_.size();
    tasks_in_flight_ -= ready_.size();
    ready_.clear();
  };
  if (device_in_flight_ > 0) reap(false);
  pump();
  drain_ready();
  while (got < target) {
    DF_CHECK(device_in_flight_ > 0);  // a task in flight that is not ready has an op in the kernel
    reap(true);
    pump();
    drain_ready();
  }
  return got;
}

void ReaderCore::drain() {
  while (device_in_flight_ > 0 || !waiting_.empty()) {
    pump();
    if (device_in_flight_ > 0) reap(true);
  }
}

Result<AlignedBuffer> ReaderCore::take_bounce(uint64_t bytes) {
  for (size_t i = 0; i < bounce_free_.size(); i++) {
    if (bounce_free_[i].size() >= bytes) {
      AlignedBuffer b = std::move(bounce_free_[i]);
      bounce_free_[i] = std::move(bounce_free_.back());
      bounce_free_.pop_back();
      return b;
    }
  }
  // Round up so that buffers are reused across slightly different sizes.
  uint64_t size = bytes <= (64u << 10) ? align_up(bytes, A) : align_up(bytes, 1u << 20);
  return AlignedBuffer::allocate(size, A);
}

void ReaderCore::give_bounce(AlignedBuffer b) {
  // Keep about what a full queue needs; free the rest.
  if (bounce_free_.size() < 2 * size_t(options_.queue_depth)) bounce_free_.push_back(std::move(b));
}

}  // namespace df::io::detail
