#include "diskformer/engine/tensor_reader.h"

#include "diskformer/gguf/breakdown.h"

#include <algorithm>

namespace df::engine {

namespace {
constexpr uint64_t kReadPiece = 8u << 20;  // reads of at most this size, many in flight
}  // namespace

Result<std::unique_ptr<TensorReader>> TensorReader::open(const store::RecordMap& map) {
  std::unique_ptr<TensorReader> r(new TensorReader(map));
  DF_ASSIGN(r->reader_, io::Reader::create({}));
  for (const std::string& path : map.files()) {
    DF_ASSIGN(const io::FileId id, r->reader_->open(path));
    r->files_.push_back(id);
  }
  return r;
}

Status TensorReader::read(std::span<const Piece> pieces) {
  std::vector<io::ReadRequest> reqs;
  auto add = [&](io::FileId file, uint64_t off, uint64_t len, uint8_t* dst) {
    for (uint64_t p = 0; p < len; p += kReadPiece)
      reqs.push_back({.file = file, .offset = off + p, .length = std::min(kReadPiece, len - p), .dst = dst + p});
  };
  for (const Piece& pc : pieces) {
    const gguf::TensorInfo& t = *pc.tensor;
    if (pc.offset > t.n_bytes || pc.length > t.n_bytes - pc.offset)
      return Error{map_.path() + ": tensor " + t.name + ": bytes " + std::to_string(pc.offset) + " + " +
                   std::to_string(pc.length) + " lie past its " + std::to_string(t.n_bytes)};
    uint8_t* dst = static_cast<uint8_t*>(pc.dst);
    if (std::optional<store::ByteRange> r = map_.tensor(t.name)) {
      const io::FileId file = files_.at(r->file);
      const uint64_t file_size = reader_->file(file).size;
      if (r->offset + r->length > file_size)
        return Error{map_.files()[r->file] + ": tensor " + t.name + " data at offset " + std::to_string(r->offset) +
                     " + " + std::to_string(r->length) + " bytes runs past the end of the file (" +
                     std::to_string(file_size) + " bytes)"};
      add(file, r->offset + pc.offset, pc.length, dst);
      continue;
    }
    // A stacked expert tensor of a store: expert e's slice is a part of record e.
    const int layer = gguf::layer_of(t.name);
    const store::ExpertLayerRecords* el = layer >= 0 ? map_.expert_layer(uint32_t(layer)) : nullptr;
    auto part = el ? std::find_if(el->parts.begin(), el->parts.end(),
                                  [&](const store::ImageTensor& x) { return x.name == t.name; })
                   : std::vector<store::ImageTensor>::const_iterator{};
    if (!el || part == el->parts.end())
      return Error{map_.path() + ": tensor " + t.name + " is not in the record map"};
    const uint64_t per = part->bytes;
    for (uint64_t x = pc.offset; x < pc.offset + pc.length;) {
      const uint64_t e = x / per, within = x % per;
      const uint64_t n = std::min(per - within, pc.offset + pc.length - x);
      add(files_.front(), el->base + e * el->stride + part->slot_offset + within, n, dst + (x - pc.offset));
      x += n;
    }
  }
  if (!progress_) return reader_->read_batch(reqs);
  constexpr uint64_t kGroup = 64ull << 20;
  for (size_t i = 0; i < reqs.size();) {
    size_t j = i;
    uint64_t bytes = 0;
    while (j < reqs.size() && (j == i || bytes + reqs[j].length <= kGroup)) bytes += reqs[j++].length;
    DF_TRY(reader_->read_batch(std::span<const io::ReadRequest>(reqs.data() + i, j - i)));
    progress_(bytes);
    i = j;
  }
  return {};
}

}  // namespace df::engine
