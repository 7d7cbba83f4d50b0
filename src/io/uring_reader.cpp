// The io_uring backend: one ring owned by the reader's thread, one SQE per op, at most queue_depth in the kernel.
// Ops whose buffer lies in registered memory use READ_FIXED, which skips pinning the pages on every read.
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "diskformer/util/check.h"
#include "io/reader_core.h"

#if defined(DISKFORMER_HAVE_URING)
#include <liburing.h>
#endif

namespace df::io::detail {

#if defined(DISKFORMER_HAVE_URING)
namespace {

constexpr unsigned kMaxEntries = 4096;
constexpr uint64_t kRegisterChunk = 1ull << 30;  // the kernel's limit on one registered buffer

class UringReader final : public ReaderCore {
 public:
  explicit UringReader(const ReaderOptions& options) : ReaderCore(Backend::kUring, options) {}

  ~UringReader() override {
    if (!ready_) return;
    drain();
    unregister_memory();
    io_uring_queue_exit(&ring_);
  }

  Status init() {
    // COOP_TASKRUN (5.19+) spares the owner thread interrupts for completions it will poll for anyway; the plain
    // setup serves older kernels. Not SINGLE_ISSUER: a reader may be made on one thread and handed to another.
    int rc = io_uring_queue_init(options_.queue_depth, &ring_, IORING_SETUP_COOP_TASKRUN);
    if (rc == -EINVAL) rc = io_uring_queue_init(options_.queue_depth, &ring_, 0);
    if (rc < 0) return Error{std::string("io_uring setup failed: ") + std::strerror(-rc)};
    ready_ = true;
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    bool can_read = probe && io_uring_opcode_supported(probe, IORING_OP_READ);
    if (probe) io_uring_free_probe(probe);
    if (!can_read) return Error{"io_uring setup failed: the kernel does not support IORING_OP_READ"};
    return Status::Ok();
  }

  bool register_memory(void* base, size_t bytes) override {
    DF_CHECK_MSG(device_in_flight() == 0, "register_memory with reads in flight");
    unregister_memory();
    if (bytes == 0) return false;
    std::vector<iovec> iov;
    for (uint64_t off = 0; off < bytes; off += kRegisterChunk)
      iov.push_back(iovec{static_cast<uint8_t*>(base) + off, size_t(std::min<uint64_t>(kRegisterChunk, bytes - off))});
    if (io_uring_register_buffers(&ring_, iov.data(), unsigned(iov.size())) != 0) return false;
    reg_base_ = static_cast<uint8_t*>(base);
    reg_bytes_ = bytes;
    return true;
  }

  void unregister_memory() override {
    if (!reg_base_) return;
    DF_CHECK_MSG(device_in_flight() == 0, "unregister_memory with reads in flight");
    io_uring_unregister_buffers(&ring_);
    reg_base_ = nullptr;
    reg_bytes_ = 0;
  }

 protected:
  void start(Op* op) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {  // cannot happen with entries >= queue depth, but a flush frees room if it ever does
      flush();
      sqe = io_uring_get_sqe(&ring_);
    }
    DF_CHECK(sqe != nullptr);
    uint8_t* buf = op->cur_buf();
    // Pieces are at most 16 MiB (reader_core.cpp), so the length fits the SQE's 32 bits.
    auto len = unsigned(op->cur_length());
    int index = registered_index(buf, len);
    if (index >= 0) {
      io_uring_prep_read_fixed(sqe, op->fd, buf, len, op->cur_offset(), index);
    } else {
      io_uring_prep_read(sqe, op->fd, buf, len, op->cur_offset());
    }
    io_uring_sqe_set_data(sqe, op);
  }

  void flush() override {
    for (;;) {
      int rc = io_uring_submit(&ring_);
      if (rc >= 0) return;
      // EAGAIN/EBUSY: the kernel is short of resources or the CQ is full; reaping makes room.
      if (rc == -EINTR) continue;
      if (rc == -EAGAIN || rc == -EBUSY) {
        collect();
        continue;
      }
      DF_CHECK_MSG(false, std::strerror(-rc));
    }
  }

  void reap(bool block) override {
    if (block) {
      io_uring_cqe* cqe = nullptr;
      int rc;
      do rc = io_uring_wait_cqe(&ring_, &cqe);
      while (rc == -EINTR || rc == -EAGAIN);
      DF_CHECK_MSG(rc == 0, std::strerror(-rc));
    }
    collect();
  }

 private:
  void collect() {
    io_uring_cqe* cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      done_.emplace_back(static_cast<Op*>(io_uring_cqe_get_data(cqe)), int64_t(cqe->res));
      n++;
    }
    io_uring_cq_advance(&ring_, n);
    // Results are handed over after the CQ is released; device_done only queues follow-up ops, never starts them.
    for (auto& [op, res] : done_) device_done(op, res);
    done_.clear();
  }

  int registered_index(const uint8_t* buf, uint64_t len) const {
    if (!reg_base_ || buf < reg_base_ || buf + len > reg_base_ + reg_bytes_) return -1;
    uint64_t first = uint64_t(buf - reg_base_) / kRegisterChunk;
    uint64_t last = uint64_t(buf + len - 1 - reg_base_) / kRegisterChunk;
    return first == last ? int(first) : -1;
  }

  io_uring ring_{};
  bool ready_ = false;
  uint8_t* reg_base_ = nullptr;
  size_t reg_bytes_ = 0;
  std::vector<std::pair<Op*, int64_t>> done_;
};

}  // namespace

Result<std::unique_ptr<Reader>> make_uring_reader(const ReaderOptions& options) {
  ReaderOptions o = options;
  o.queue_depth = std::clamp(options.queue_depth, 1u, kMaxEntries);
  auto reader = std::make_unique<UringReader>(o);
  DF_TRY(reader->init());
  return std::unique_ptr<Reader>(std::move(reader));
}

#else

Result<std::unique_ptr<Reader>> make_uring_reader(const ReaderOptions&) {
  return Error{"io_uring unavailable: diskformer was built without liburing"};
}

#endif

}  // namespace df::io::detail
