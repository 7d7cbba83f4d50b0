// A split GGUF (the shared three-part copy of qwen3-q4_0) as a record source: its in-place map reads every record's
// image across the parts as the single file's map does; ingest from its first part writes the single file's data.bin
// (a kill and a resume included, across the parts), keeps each part's header and fingerprint, and Store::open
// notices a part that changed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "diskformer/gguf/split.h"
#include "diskformer/io/reader.h"
#include "diskformer/store/ingest.h"
#include "diskformer/store/record.h"
#include "diskformer/store/store.h"
#include "store/store_test_util.h"

namespace df::store {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFirst = "models/split/qwen3-q4_0-00001-of-00003.gguf";
constexpr const char* kSingle = "models/qwen3-q4_0.gguf";

// A record's image, each part read from its own file of the map.
std::vector<uint8_t> image(io::Reader& r, const std::vector<io::FileId>& files, const RecordMap& map, RecordKey key) {
  std::vector<RecordPart> parts;
  Status st = map.parts(key, parts);
  EXPECT_TRUE(st.ok()) << st.error().message;
  const uint64_t bytes = key.kind == RecordKind::kTableRow ? map.tables()[key.layer].row_bytes
                                                           : map.record_bytes(key.kind, key.layer);
  std::vector<uint8_t> out(bytes, 0);
  for (const auto& p : parts) {
    EXPECT_LT(p.file, files.size());
    Status rs = r.read(files[p.file], p.file_offset, p.length, out.data() + p.slot_offset);
    EXPECT_TRUE(rs.ok()) << rs.error().message;
  }
  return out;
}

std::vector<io::FileId> open_all(io::Reader& r, const RecordMap& map) {
  std::vector<io::FileId> ids;
  for (const auto& f : map.files()) {
    auto id = r.open(f);
    EXPECT_TRUE(id.ok()) << id.error().message;
    ids.push_back(*id);
  }
  return ids;
}

std::string ingest_error(const fs::path& model, const fs::path& dir) {
  auto r = ingest({.source = model.string(), .dir = dir.string()});
  return r.ok() ? "" : r.error().message;
}

TEST(SplitStore, InPlaceRecordsAcrossPartsAreTheSingleFilesRecords) {
  DF_REQUIRE_SHARED(first, kFirst);
  DF_REQUIRE_SHARED(single, kSingle);
  auto split_file = gguf::read_model(first.string());
  auto single_file = gguf::read_model(single.string());
  ASSERT_TRUE(split_file.ok() && single_file.ok());
  auto split = RecordMap::in_place(*split_file);
  auto one = RecordMap::in_place(*single_file);
  ASSERT_TRUE(split.ok() && one.ok());
  ASSERT_EQ(split->files().size(), 3u);
  EXPECT_EQ(split->files()[2], split_file->part_path(2));
  EXPECT_EQ(split->file_bytes(), split_file->file_size);
  for (const auto& t : split_file->tensors) {
    auto r = split->tensor(t.name);
    ASSERT_TRUE(r.has_value()) << t.name;
    EXPECT_EQ(r->file, t.part) << t.name;
    EXPECT_EQ(r->offset, t.offset) << t.name;
  }
  auto reader = io::Reader::create();
  ASSERT_TRUE(reader.ok());
  const auto split_ids = open_all(**reader, *split), one_ids = open_all(**reader, *one);
  bool crosses = false;  // a layer whose tensors lie in two parts
  ASSERT_EQ(split->layers().size(), one->layers().size());
  for (const auto& lr : split->layers()) {
    std::vector<RecordPart> parts;
    ASSERT_TRUE(split->parts({RecordKind::kLayer, lr.layer, 0}, parts).ok());
    for (const auto& p : parts) crosses = crosses || p.file != parts.front().file;
    const RecordKey key{RecordKind::kLayer, lr.layer, 0};
    EXPECT_EQ(image(**reader, split_ids, *split, key), image(**reader, one_ids, *one, key)) << "layer " << lr.layer;
  }
  EXPECT_TRUE(crosses) << "gguf-split cut no layer in two: the test shows less than it should";
  for (uint32_t row : {0u, 1234u, 31999u}) {
    const RecordKey key{RecordKind::kTableRow, 0, row};
    EXPECT_EQ(image(**reader, split_ids, *split, key), image(**reader, one_ids, *one, key)) << "row " << row;
  }
}

TEST(SplitStore, IngestFromTheFirstPartWritesTheSingleFilesData) {
  DF_REQUIRE_SHARED(first, kFirst);
  DF_REQUIRE_SHARED(single, kSingle);
  const fs::path tmp = test::temp_dir("split_ingest");
  ASSERT_EQ(ingest_error(first, tmp / "split"), "");
  ASSERT_EQ(ingest_error(single, tmp / "single"), "");
  EXPECT_TRUE(test::slurp(tmp / "split" / kDataFile) == test::slurp(tmp / "single" / kDataFile));
  // Each part's header, as its file has it.
  for (uint32_t k = 0; k < 3; ++k) {
    const fs::path part = first.parent_path() / gguf::split_path("qwen3-q4_0", k, 3);
    const std::string header = test::slurp(tmp / "split" / header_file(k));
    ASSERT_FALSE(header.empty()) << header_file(k);
    EXPECT_TRUE(test::slurp(part).compare(0, header.size(), header) == 0) << header_file(k);
  }
  auto j = nlohmann::json::parse(test::slurp(tmp / "split" / kManifestFile));
  auto s = nlohmann::json::parse(test::slurp(tmp / "single" / kManifestFile));
  EXPECT_EQ(j["records"], s["records"]);
  ASSERT_EQ(j["split_parts"].size(), 2u);
  EXPECT_EQ(j["split_parts"][1]["location"], (first.parent_path() / "qwen3-q4_0-00003-of-00003.gguf").string());
  EXPECT_FALSE(s.contains("split_parts"));

  auto store = Store::open((tmp / "split").string(), {.source = first.string()});
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_EQ(store->sources().size(), 3u);
  EXPECT_EQ(store->model().tensors.size(), 47u);
  EXPECT_EQ(store->model().n_parts(), 3u);
  EXPECT_EQ(store->records().files().size(), 1u);

  // Run again: up to date.
  auto again = ingest({.source = first.string(), .dir = (tmp / "split").string()});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->up_to_date);
}

TEST(SplitStore, APartThatChangedIsNamed) {
  DF_REQUIRE_SHARED(shared_first, kFirst);
  const fs::path tmp = test::temp_dir("split_changed");
  for (uint32_t k = 0; k < 3; ++k)
    test::copy_writable(shared_first.parent_path() / gguf::split_path("qwen3-q4_0", k, 3),
                        tmp / gguf::split_path("m", k, 3));
  const fs::path first = tmp / "m-00001-of-00003.gguf";
  ASSERT_EQ(ingest_error(first, tmp / "store"), "");
  fs::last_write_time(tmp / "m-00003-of-00003.gguf", fs::last_write_time(first) - std::chrono::hours(1));
  auto s = Store::open((tmp / "store").string(), {.source = first.string()});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("part 3: mtime"), std::string::npos) << s.error().message;
  // A store whose header of part 2 went missing is refused, naming it.
  fs::remove(tmp / "store" / "header-00002.gguf");
  auto t = Store::open((tmp / "store").string());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("header-00002.gguf"), std::string::npos) << t.error().message;
  // ingest rebuilds it, saying what changed.
  std::string notes;
  auto r = ingest({.source = first.string(), .dir = (tmp / "store").string(),
                   .on_note = [&](const std::string& n) { notes += n + "\n"; }});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_NE(notes.find("part 3: mtime"), std::string::npos) << notes;
  EXPECT_TRUE(Store::open((tmp / "store").string(), {.source = first.string()}).ok());
}

// An ingest ended inside the last part (its process exits from the progress callback, after a checkpoint) resumes
// there and ends with the single file's data.
TEST(SplitStore, AnIngestStoppedInTheLastPartResumes) {
  DF_REQUIRE_SHARED(first, kFirst);
  DF_REQUIRE_SHARED(single, kSingle);
  const fs::path tmp = test::temp_dir("split_resume");
  const fs::path dir = tmp / "store";
  const uint64_t first_parts = fs::file_size(first) +
                               fs::file_size(first.parent_path() / "qwen3-q4_0-00002-of-00003.gguf");
  const pid_t pid = ::fork();
  if (pid == 0) {
    IngestOptions o{.source = first.string(), .dir = dir.string(), .checkpoint_every = 64 << 10};
    o.on_progress = [&](const IngestProgress& p) {
      if (p.done > first_parts + (256 << 10)) ::_exit(42);
    };
    auto r = ingest(o);
    ::_exit(r.ok() ? 0 : 1);
  }
  ASSERT_EQ(test::wait_child(pid), 42);
  ASSERT_TRUE(fs::exists(dir / kProgressFile));
  ASSERT_FALSE(fs::exists(dir / kManifestFile));
  auto r = ingest({.source = first.string(), .dir = dir.string()});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->resumed);
  EXPECT_GT(r->resumed_at, first_parts - (64 << 10) * 4);
  ASSERT_EQ(ingest_error(single, tmp / "single"), "");
  EXPECT_TRUE(test::slurp(dir / kDataFile) == test::slurp(tmp / "single" / kDataFile));
}

}  // namespace
}  // namespace df::store
