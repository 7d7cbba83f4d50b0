// model::TensorSource over a record map: whole tensors read through the disk tier (io_uring with O_DIRECT, or the
// pread pool) from wherever the map puts their bytes -- one range of the GGUF (or of one of its parts), one range
// of a store's data file, or for a stacked expert tensor of a store one slice per expert record. Large ranges are
// cut into pieces so that many reads are in flight.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "diskformer/io/reader.h"
#include "diskformer/model/weights.h"
#include "diskformer/store/record.h"

namespace df::engine {

class TensorReader final : public model::TensorSource {
 public:
  // `map` must outlive the reader. Errors: one of the map's files cannot be opened.
  static Result<std::unique_ptr<TensorReader>> open(const store::RecordMap& map);
  Status read(std::span<const Piece> pieces) override;
  // Called with the bytes of each group of reads as it completes (groups of about 64 MiB when set, so that a
  // progress bar moves); nullptr: one batch per read().
  void set_progress(std::function<void(uint64_t bytes)> f) { progress_ = std::move(f); }
  uint64_t bytes_read() const { return reader_->stats().bytes; }

 private:
  TensorReader(const store::RecordMap& map) : map_(map) {}
  const store::RecordMap& map_;
  std::unique_ptr<io::Reader> reader_;
  std::vector<io::FileId> files_;  // the map's files, in its order
  std::function<void(uint64_t)> progress_;
};

}  // namespace df::engine
