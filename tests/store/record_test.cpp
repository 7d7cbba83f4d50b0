// Record maps: in-place ranges follow the GGUF's tensors; a repacked store built by ingest gives every record the
// same bytes through one aligned range; Store::open refuses a store that does not match.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "diskformer/cache/slot_pool.h"
#include "diskformer/io/reader.h"
#include "diskformer/store/ingest.h"
#include "diskformer/store/record.h"
#include "diskformer/store/store.h"
#include "store/store_test_util.h"

namespace df::store {
namespace {

namespace fs = std::filesystem;

const char* kModels[] = {"qwen3moe-q4_0.gguf", "qwen3moe-q8_0.gguf", "qwen3-q4_0.gguf", "llama-f16.gguf",
                         "mixtral-q4_0.gguf"};

// A record's image: each part read from the map's file and placed at its slot offset.
std::vector<uint8_t> read_image(io::Reader& r, io::FileId file, const RecordMap& map, RecordKey key) {
  std::vector<RecordPart> parts;
  Status st = map.parts(key, parts);
  EXPECT_TRUE(st.ok()) << st.error().message;
  uint64_t bytes = key.kind == RecordKind::kTableRow ? map.tables()[key.layer].row_bytes
                                                     : map.record_bytes(key.kind, key.layer);
  std::vector<uint8_t> image(bytes, 0);
  for (const auto& p : parts) {
    EXPECT_LE(p.slot_offset + p.length, bytes);
    Status rs = r.read(file, p.file_offset, p.length, image.data() + p.slot_offset);
    EXPECT_TRUE(rs.ok()) << rs.error().message;
  }
  return image;
}

gguf::File load(const fs::path& p) {
  auto f = gguf::read_file(p.string());
  EXPECT_TRUE(f.ok()) << f.error().message;
  return std::move(f).value();
}

Store ingest_into(const fs::path& model, const fs::path& dir) {
  IngestOptions o;
  o.source = model.string();
  o.dir = dir.string();
  auto r = ingest(o);
  EXPECT_TRUE(r.ok()) << r.error().message;
  auto s = Store::open(dir.string());
  EXPECT_TRUE(s.ok()) << s.error().message;
  return std::move(s).value();
}

TEST(RecordMap, InPlaceExpertIsThreeSlicesOfItsTensors) {
  DF_REQUIRE_SHARED(path, "models/mixtral-q4_0.gguf");
  gguf::File f = load(path);
  auto map = RecordMap::in_place(f);
  ASSERT_TRUE(map.ok()) << map.error().message;
  ASSERT_EQ(map->expert_layers().size(), 4u);
  std::vector<RecordPart> parts;
  ASSERT_TRUE(map->parts({RecordKind::kExpert, 2, 5}, parts).ok());
  ASSERT_EQ(parts.size(), 3u);
  const char* names[] = {"blk.2.ffn_gate_exps.weight", "blk.2.ffn_up_exps.weight", "blk.2.ffn_down_exps.weight"};
  uint64_t slot = 0;
  for (int i = 0; i < 3; ++i) {
    const gguf::TensorInfo* t = f.tensor(names[i]);
    ASSERT_NE(t, nullptr);
    uint64_t slice = t->n_bytes / 8;
    EXPECT_EQ(parts[i].file_offset, t->offset + 5 * slice) << names[i];
    EXPECT_EQ(parts[i].length, slice);
    EXPECT_EQ(parts[i].slot_offset, slot);
    slot += slice;
  }
  EXPECT_EQ(map->record_bytes(RecordKind::kExpert, 2), slot);

  // Table rows are rows of token_embd; layers hold everything of blk.N except the experts.
  const gguf::TensorInfo* emb = f.tensor("token_embd.weight");
  ASSERT_TRUE(map->parts({RecordKind::kTableRow, 0, 31999}, parts).ok());
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].file_offset, emb->offset + 31999 * emb->row_bytes());
  EXPECT_EQ(parts[0].length, emb->row_bytes());
  const LayerRecord* lr = map->layer(3);
  ASSERT_NE(lr, nullptr);
  for (const auto& t : lr->tensors) {
    EXPECT_EQ(t.name.find("_exps"), std::string::npos) << t.name;
    EXPECT_EQ(t.slot_offset % kLayerTensorAlignment, 0u);
  }
  EXPECT_EQ(lr->tensors.size(), 7u);

  // Keys that do not exist are errors naming them.
  auto bad = map->parts({RecordKind::kExpert, 2, 8}, parts);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("has 8 experts"), std::string::npos) << bad.error().message;
  EXPECT_FALSE(map->parts({RecordKind::kLayer, 4, 0}, parts).ok());
  EXPECT_FALSE(map->parts({RecordKind::kTableRow, 0, 32000}, parts).ok());
  EXPECT_FALSE(map->parts({RecordKind::kTableRow, 1, 0}, parts).ok());
}

TEST(RecordMap, RepackedRecordsAreAlignedAndDisjoint) {
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  gguf::File f = load(path);
  auto map = RecordMap::repacked(f, "data.bin");
  ASSERT_TRUE(map.ok()) << map.error().message;
  std::vector<ByteRange> used;
  std::vector<RecordPart> parts;
  for (const auto& el : map->expert_layers()) {
    EXPECT_EQ(el.stride % kRecordAlignment, 0u);
    EXPECT_GE(el.stride, el.record_bytes);
    for (uint32_t e = 0; e < el.n_experts; ++e) {
      ASSERT_TRUE(map->parts({RecordKind::kExpert, el.layer, e}, parts).ok());
      ASSERT_EQ(parts.size(), 1u);
      EXPECT_EQ(parts[0].file_offset % kRecordAlignment, 0u);
      EXPECT_EQ(parts[0].length, el.record_bytes);
      used.push_back({parts[0].file_offset, parts[0].length});
    }
  }
  for (const auto& lr : map->layers()) {
    ASSERT_TRUE(map->parts({RecordKind::kLayer, lr.layer, 0}, parts).ok());
    ASSERT_EQ(parts.size(), 1u);
    EXPECT_EQ(parts[0].file_offset % kRecordAlignment, 0u);
    used.push_back({parts[0].file_offset, parts[0].length});
  }
  for (const auto& [name, r] : map->globals()) {
    EXPECT_EQ(r.offset % kRecordAlignment, 0u) << name;
    used.push_back(r);
  }
  std::sort(used.begin(), used.end(), [](auto a, auto b) { return a.offset < b.offset; });
  for (size_t i = 1; i < used.size(); ++i) ASSERT_LE(used[i - 1].offset + used[i - 1].length, used[i].offset);
  EXPECT_LE(used.back().offset + used.back().length, map->file_bytes());
  EXPECT_EQ(map->file_bytes() % kRecordAlignment, 0u);
  EXPECT_FALSE(map->tensor("blk.0.ffn_up_exps.weight").has_value());  // experts exist only as records
  EXPECT_TRUE(map->tensor("blk.0.attn_q.weight").has_value());
}

// Every record of every shared model reads back identical from the GGUF in place and from an ingested store.
TEST(RecordMap, StoreRecordsEqualInPlaceRecords) {
  for (const char* name : kModels) {
    DF_REQUIRE_SHARED(path, std::string("models/") + name);
    SCOPED_TRACE(name);
    fs::path dir = test::temp_dir("store");
    Store store = ingest_into(path, dir);
    gguf::File f = load(path);
    auto in_place = RecordMap::in_place(f);
    ASSERT_TRUE(in_place.ok());
    const RecordMap& packed = store.records();
    auto reader = io::Reader::create();
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    auto src_id = (*reader)->open(path.string());
    auto dst_id = (*reader)->open(packed.path());
    ASSERT_TRUE(src_id.ok() && dst_id.ok());
    size_t compared = 0;
    for (const auto& el : in_place->expert_layers())
      for (uint32_t e = 0; e < el.n_experts; ++e, ++compared) {
        RecordKey k{RecordKind::kExpert, el.layer, e};
        ASSERT_EQ(read_image(**reader, *src_id, *in_place, k), read_image(**reader, *dst_id, packed, k))
            << "expert " << el.layer << "/" << e;
      }
    for (const auto& lr : in_place->layers()) {
      RecordKey k{RecordKind::kLayer, lr.layer, 0};
      ASSERT_EQ(read_image(**reader, *src_id, *in_place, k), read_image(**reader, *dst_id, packed, k))
          << "layer " << lr.layer;
      ++compared;
    }
    for (uint32_t t = 0; t < in_place->tables().size(); ++t)
      for (uint64_t row : {uint64_t{0}, uint64_t{1}, in_place->tables()[t].rows - 1}) {
        RecordKey k{RecordKind::kTableRow, t, static_cast<uint32_t>(row)};
        ASSERT_EQ(read_image(**reader, *src_id, *in_place, k), read_image(**reader, *dst_id, packed, k));
        ++compared;
      }
    // Whole tensors outside the records (output head, norms) too.
    for (const auto& [tname, r] : in_place->globals()) {
      auto at = packed.tensor(tname);
      ASSERT_TRUE(at.has_value()) << tname;
      std::vector<uint8_t> a(r.length), b(r.length);
      ASSERT_TRUE((*reader)->read(*src_id, r.offset, r.length, a.data()).ok());
      ASSERT_TRUE((*reader)->read(*dst_id, at->offset, at->length, b.data()).ok());
      ASSERT_EQ(a, b) << tname;
    }
    EXPECT_GT(compared, 4u);
    // The store's model is the source's header: same tensors, same metadata.
    EXPECT_EQ(store.model().tensors.size(), f.tensors.size());
    EXPECT_EQ(store.model().architecture(), f.architecture());
    auto both = open_model_records(dir.string());
    ASSERT_TRUE(both.ok()) << both.error().message;
    EXPECT_TRUE(both->from_store);
    auto plain = open_model_records(path.string());
    ASSERT_TRUE(plain.ok());
    EXPECT_FALSE(plain->from_store);
    fs::remove_all(dir);
  }
}

void edit_manifest(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto j = nlohmann::json::parse(test::slurp(dir / kManifestFile));
  edit(j);
  std::ofstream(dir / kManifestFile) << j.dump(1);
}

TEST(Store, RefusesWhatDoesNotMatch) {
  DF_REQUIRE_SHARED(model, "models/qwen3-q4_0.gguf");
  fs::path tmp = test::temp_dir("refuse");
  test::copy_writable(model, tmp / "m.gguf");
  fs::path dir = tmp / "store";
  ingest_into(tmp / "m.gguf", dir);
  ASSERT_TRUE(Store::open(dir.string(), {.source = (tmp / "m.gguf").string()}).ok());

  auto expect_refused = [&](const std::string& needle, const StoreOptions& o = {}) {
    auto s = Store::open(dir.string(), o);
    ASSERT_FALSE(s.ok()) << "expected a refusal mentioning " << needle;
    EXPECT_NE(s.error().message.find(needle), std::string::npos) << s.error().message;
  };
  // The source changed: its mtime (and then its size) no longer match.
  fs::last_write_time(tmp / "m.gguf", fs::last_write_time(tmp / "m.gguf") + std::chrono::seconds(5));
  expect_refused("mtime", {.source = (tmp / "m.gguf").string()});
  { std::ofstream(tmp / "m.gguf", std::ios::app) << "x"; }
  expect_refused("size", {.source = (tmp / "m.gguf").string()});

  std::string saved = test::slurp(dir / kManifestFile);
  edit_manifest(dir, [](auto& j) { j["layout_version"] = 2; });
  expect_refused("layout_version 2");
  std::ofstream(dir / kManifestFile) << saved;
  edit_manifest(dir, [](auto& j) { j["planes"] = "values+scales"; });
  expect_refused("planes");
  std::ofstream(dir / kManifestFile) << saved;
  edit_manifest(dir, [](auto& j) { j["records"]["layers"][1]["offset"] = 4096; });
  expect_refused("record table");
  std::ofstream(dir / kManifestFile) << saved;
  ASSERT_TRUE(Store::open(dir.string()).ok());

  fs::resize_file(dir / kDataFile, fs::file_size(dir / kDataFile) - 4096);
  expect_refused("data.bin");
  fs::remove(dir / kManifestFile);
  expect_refused("not a store");
  std::ofstream(dir / kProgressFile) << "{}";
  expect_refused("incomplete");
}


TEST(RecordKey, PacksIntoOneNumber) {
  for (RecordKey k : {RecordKey{RecordKind::kExpert, 47, 127}, RecordKey{RecordKind::kTableRow, 1, 151935},
                      RecordKey{RecordKind::kLayer, 1'000'000, 0}}) {
    RecordKey u = unpack(pack(k));
    EXPECT_EQ(u.kind, k.kind);
    EXPECT_EQ(u.layer, k.layer);
    EXPECT_EQ(u.index, k.index);
  }
  EXPECT_NE(pack({RecordKind::kExpert, 1, 0}), pack({RecordKind::kExpert, 0, 1}));
  EXPECT_NE(pack({RecordKind::kExpert, 0, 0}), pack({RecordKind::kLayer, 0, 0}));
}

// The contract with cache/: a slot pool whose locator is a RecordMap holds the same record images whether the map
// points into the GGUF (three slices per expert) or into a store (one aligned range).
TEST(RecordMap, SlotPoolReadsTheSameImagesFromBothMaps) {
  DF_REQUIRE_SHARED(path, "models/mixtral-q4_0.gguf");
  fs::path dir = test::temp_dir("pool");
  Store store = ingest_into(path, dir);
  gguf::File f = load(path);
  auto in_place = RecordMap::in_place(f);
  ASSERT_TRUE(in_place.ok());
  std::vector<std::vector<uint8_t>> images[2];
  for (int which = 0; which < 2; ++which) {
    const RecordMap& map = which == 0 ? *in_place : store.records();
    auto reader = io::Reader::create();
    ASSERT_TRUE(reader.ok());
    auto file = (*reader)->open(map.path());
    ASSERT_TRUE(file.ok()) << file.error().message;
    io::FileId id = *file;
    cache::Locator locate = [&map, id](cache::Key key, std::vector<cache::Extent>& out) -> Status {
      std::vector<RecordPart> parts;
      DF_TRY(map.parts(unpack(key), parts));
      for (const auto& p : parts) out.push_back({id, p.file_offset, p.length, p.slot_offset});
      return {};
    };
    uint64_t record = map.record_bytes(RecordKind::kExpert, 0);
    auto pool = cache::HostSlotPool::create(std::move(reader).value(), locate, {.slots = 4, .slot_bytes = record});
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    for (const auto& el : map.expert_layers())
      for (uint32_t e = 0; e < el.n_experts; ++e) {
        auto h = (*pool)->get(pack({RecordKind::kExpert, el.layer, e}));
        ASSERT_TRUE(h.ok()) << h.error().message;
        images[which].emplace_back(h->bytes(), h->bytes() + record);
      }
  }
  ASSERT_EQ(images[0].size(), 32u);
  EXPECT_NE(images[0][5], std::vector<uint8_t>(images[0][5].size(), 0));
  EXPECT_NE(images[0][5], images[0][6]);
  EXPECT_TRUE(images[0] == images[1]);
}

}  // namespace
}  // namespace df::store
