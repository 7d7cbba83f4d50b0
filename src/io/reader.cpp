#include "diskformer/io/reader.h"

#include "diskformer/util/check.h"
#include "io/reader_core.h"

namespace df::io {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kUring: return "io_uring";
    case Backend::kPread: return "pread";
  }
  return "?";
}

AlignedSpan covering_span(uint64_t offset, uint64_t length, uint64_t alignment) {
  AlignedSpan s;
  s.offset = align_down(offset, alignment);
  s.head = offset - s.offset;
  s.length = align_up(offset + length, alignment) - s.offset;
  return s;
}

Result<std::unique_ptr<Reader>> Reader::create(const ReaderOptions& options) {
  switch (options.backend) {
    case Backend::kPread: return detail::make_pread_reader(options);
    case Backend::kUring: return detail::make_uring_reader(options);
    case Backend::kAuto: {
      auto uring = detail::make_uring_reader(options);
      if (uring.ok()) return uring;
      return detail::make_pread_reader(options);
    }
  }
  return Error{"unknown read backend"};
}

Status Reader::read(FileId file, uint64_t offset, uint64_t length, void* dst) {
  ReadRequest r{.file = file, .offset = offset, .length = length, .dst = dst};
  return read_batch({&r, 1});
}

Status Reader::read_batch(std::span<const ReadRequest> requests) {
  DF_CHECK_MSG(in_flight() == 0, "Reader::read_batch with other requests in flight");
  submit(requests);
  std::vector<Completion> done;
  done.reserve(requests.size());
  while (in_flight() > 0) poll(done, in_flight());
  for (auto& c : done)
    if (!c.status.ok()) return c.status.take_error();
  return Status::Ok();
}

}  // namespace df::io
