// Records: the units a cache streams. A record is addressed as (kind, layer, index) and is one fixed-size "slot
// image" per kind and layer; a RecordMap says which byte ranges of which file fill which parts of that image.
//
//   kExpert   (layer L, expert e): the e-th slice of each routed-expert tensor of blk.L, back to back in the order
//             gate (or a fused gate_up), up, down (then any other *_exps tensor of the layer, in file order). A
//             [n_in, n_out, n_exp] tensor's slice e is contiguous: n_bytes / n_exp bytes at offset + e * n_bytes /
//             n_exp.
//   kTableRow (table t, row r): row r of a lookup table (t indexes tables(): token_embd first, then
//             per_layer_token_embd where present).
//   kLayer    (layer L, index 0): every tensor of blk.L except its routed experts (those are kExpert records), in
//             file order, each at a 256-byte-aligned offset inside the image. For a dense model that is the whole
//             layer.
//
// The same image comes out of both maps: in place (ranges inside the GGUF, an expert is three slices) and repacked
// (ranges inside a store's data file made by `ingest`, every expert and layer one contiguous 4 KiB-aligned range).
// Every range names its file: an index into files(), which for a split GGUF (gguf/split.h) lists every part and
// otherwise holds the one GGUF or data file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diskformer/gguf/reader.h"
#include "diskformer/util/result.h"

namespace df::store {

enum class RecordKind : uint8_t { kExpert, kTableRow, kLayer };
std::string_view record_kind_name(RecordKind k);  // "expert", "table row", "layer"

struct RecordKey {
  RecordKind kind = RecordKind::kExpert;
  uint32_t layer = 0;  // block number; for kTableRow the table's position in RecordMap::tables()
  uint32_t index = 0;  // expert id, row id; 0 for kLayer
};

// A key as one 64-bit number (for caches keyed by integers): kind in bits 56-63, layer in 32-55, index in 0-31.
constexpr uint64_t pack(RecordKey k) {
  return uint64_t{static_cast<uint8_t>(k.kind)} << 56 | uint64_t{k.layer & 0xffffffu} << 32 | k.index;
}
constexpr RecordKey unpack(uint64_t v) {
  return {static_cast<RecordKind>(v >> 56), static_cast<uint32_t>(v >> 32) & 0xffffffu, static_cast<uint32_t>(v)};
}

struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t file = 0;  // index into RecordMap::files()
  bool operator==(const ByteRange&) const = default;
};

// `length` bytes of file `file` of the map at `file_offset` belong at `slot_offset` inside the record's image.
struct RecordPart {
  uint64_t file_offset = 0;
  uint64_t length = 0;
  uint64_t slot_offset = 0;
  uint32_t file = 0;  // index into RecordMap::files()
};

// One tensor's place inside a record image.
struct ImageTensor {
  std::string name;
  uint64_t slot_offset = 0;
  uint64_t bytes = 0;        // kExpert: one expert's slice of the tensor
  uint64_t file_offset = 0;  // in place: the tensor's offset in the GGUF (the whole tensor, all experts)
  uint32_t file = 0;         // in place: the file (part) holding it
  bool operator==(const ImageTensor&) const = default;
};

struct ExpertLayerRecords {
  uint32_t layer = 0;
  uint32_t n_experts = 0;
  std::vector<ImageTensor> parts;  // gate, up, down, then other *_exps tensors
  uint64_t record_bytes = 0;       // image size: the sum of the parts
  uint64_t base = 0, stride = 0;   // repacked: expert e's record is at base + e * stride
};

struct LayerRecord {
  uint32_t layer = 0;
  std::vector<ImageTensor> tensors;  // file order, 256-byte-aligned slot offsets
  uint64_t record_bytes = 0;         // image size: end of the last tensor
  uint64_t base = 0;                 // repacked: where the image starts in the data file
};

struct TableRecords {
  std::string tensor;
  uint64_t rows = 0, row_bytes = 0;
  uint64_t base = 0;  // where row 0 is in the map's file (rows are contiguous in both maps)
  uint32_t file = 0;
};

constexpr uint64_t kLayerTensorAlignment = 256;  // of tensors inside a layer image
constexpr uint64_t kRecordAlignment = 4096;      // of records and tensors in a repacked data file

class RecordMap {
 public:
  // Ranges inside the GGUF itself (every part of a split one). The error names the file and the tensor whose shape
  // does not fit a record.
  static Result<RecordMap> in_place(const gguf::File& f);
  // The repacked layout (layout version 1) of the same records in a data file at `data_path`: the tensors outside
  // the blocks first (each 4 KiB-aligned, in file order), then for each layer its layer image and its experts'
  // records (each 4 KiB-aligned, stride = record size rounded up to 4 KiB).
  static Result<RecordMap> repacked(const gguf::File& f, const std::string& data_path);

  // The files the ranges point into: the GGUF, its parts, or the store's data file.
  const std::vector<std::string>& files() const { return files_; }
  const std::string& path() const { return files_.front(); }  // the first file: names the model in messages
  bool is_repacked() const { return repacked_; }
  uint64_t file_bytes() const { return file_bytes_; }  // repacked: the data file's size; in place: all files'

  // Replaces `out` with the record's parts (reuse the vector: no allocation once it has grown). The error names the
  // key when the layer, expert, table or row does not exist.
  Status parts(RecordKey key, std::vector<RecordPart>& out) const;
  // The image size of a record of this kind and layer (table: one row); 0 where no such record exists.
  uint64_t record_bytes(RecordKind kind, uint32_t layer) const;

  const std::vector<ExpertLayerRecords>& expert_layers() const { return experts_; }
  const std::vector<LayerRecord>& layers() const { return layers_; }
  const std::vector<TableRecords>& tables() const { return tables_; }
  const ExpertLayerRecords* expert_layer(uint32_t layer) const;
  const LayerRecord* layer(uint32_t layer) const;

  // Where a whole tensor lies in the map's files: every tensor in place; in a repacked file every tensor except the
  // routed experts (which exist only as records there).
  std::optional<ByteRange> tensor(std::string_view name) const;

  // Tensors outside the blocks (token_embd, output_norm, output, ...): name and range in the map's files.
  const std::vector<std::pair<std::string, ByteRange>>& globals() const { return globals_; }

 private:
  static Result<RecordMap> build(const gguf::File& f);

  std::vector<std::string> files_{std::string()};
  bool repacked_ = false;
  uint64_t file_bytes_ = 0;
  std::vector<ExpertLayerRecords> experts_;  // ascending layer
  std::vector<LayerRecord> layers_;          // ascending layer
  std::vector<TableRecords> tables_;
  std::vector<std::pair<std::string, ByteRange>> globals_;
  std::vector<std::pair<std::string, ByteRange>> tensor_ranges_;  // sorted by name: tensor() lookups
  std::vector<int32_t> expert_index_, layer_index_;                // block number -> position, -1 where none
};

}  // namespace df::store
