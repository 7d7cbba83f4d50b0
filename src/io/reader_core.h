// What both read backends share: the file table, cutting a caller's request into device reads (aligned spans,
// bounce buffers), resuming short reads, retries, the O_DIRECT fallback, completions and counters. A backend only
// moves Ops to the kernel (start) and hands their results back (reap -> device_done).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "diskformer/io/reader.h"

namespace df::io::detail {

struct Task;

// One read(2)-shaped call's worth of work: [offset, offset + length) of fd into buf.
struct Op {
  Task* task = nullptr;
  uint32_t file = 0;
  int fd = -1;
  bool direct = false;    // fd is the O_DIRECT one: offset, length and buf are aligned
  uint64_t offset = 0;
  uint64_t length = 0;    // asked from the kernel; may run past the end of the file (aligned span)
  uint64_t need = 0;      // bytes of [offset, ...) that must arrive; <= length
  uint64_t done = 0;      // bytes arrived so far
  uint8_t* buf = nullptr; // caller memory or bounce.data() (set when the op starts)
  uint64_t bounce_bytes = 0;  // > 0: reads into a bounce buffer of this size, taken when the op starts
  AlignedBuffer bounce;   // then copied: bounce[copy_from, +copy_len) to copy_to once done
  uint64_t copy_from = 0, copy_len = 0;
  uint8_t* copy_to = nullptr;
  unsigned retries = 0;

  // The rest of this op as one call.
  uint8_t* cur_buf() const { return buf + done; }
  uint64_t cur_offset() const { return offset + done; }
  uint64_t cur_length() const { return length - done; }
};

struct Task {
  ReadRequest request;
  uint32_t ops_left = 0;
  Status status;
  uint64_t submit_ns = 0;
};

struct OpenFile {
  FileInfo info;
  int fd_buffered = -1;
  int fd_direct = -1;  // -1 where O_DIRECT is off or was refused
};

uint64_t now_ns();

class ReaderCore : public Reader {
 public:
  ReaderCore(Backend backend, ReaderOptions options);
  ~ReaderCore() override;  // closes files; derived destructors drain() first

  Result<FileId> open(const std::string& path) override;
  const FileInfo& file(FileId id) const override;
  void submit(std::span<const ReadRequest> requests) override;
  size_t poll(std::vector<Completion>& out, size_t wait_for) override;
  size_t in_flight() const override { return tasks_in_flight_; }

 protected:
  // Hands one op to the kernel; called at most queue_depth times without a device_done in between.
  virtual void start(Op* op) = 0;
  // Makes queued starts visible to the kernel (io_uring_submit); a no-op for the pool.
  virtual void flush() {}
  // Collects finished device reads and calls device_done for each; with block, waits for at least one.
  virtual void reap(bool block) = 0;

  // res: bytes read (>= 0) or -errno.
  void device_done(Op* op, int64_t res);
  // Waits for every op the kernel still holds (buffers must not be freed under it).
  void drain();
  size_t device_in_flight() const { return device_in_flight_; }

 private:
  void plan(Task* task);
  Op* new_op(Task* task, const OpenFile& f, bool direct, uint64_t offset, uint64_t length, uint64_t need);
  void add_bounced(Task* task, const OpenFile& f, uint64_t span_offset, uint64_t span_length, uint64_t copy_from,
                   uint64_t copy_len, uint8_t* copy_to);
  void finish_op(Op* op);
  void fail_task(Task* task, Error error);
  void finish_task(Task* task);
  void pump();
  Result<AlignedBuffer> take_bounce(uint64_t bytes);
  void give_bounce(AlignedBuffer b);

  std::vector<OpenFile> files_;
  std::deque<Op*> waiting_;                  // planned, not yet started (queue depth reached)
  std::vector<std::unique_ptr<Op>> op_free_;
  std::vector<AlignedBuffer> bounce_free_;
  std::vector<std::unique_ptr<Task>> task_free_;
  std::vector<Completion> ready_;
  size_t tasks_in_flight_ = 0;
  size_t device_in_flight_ = 0;
};

Result<std::unique_ptr<Reader>> make_uring_reader(const ReaderOptions& options);
Result<std::unique_ptr<Reader>> make_pread_reader(const ReaderOptions& options);

}  // namespace df::io::detail
