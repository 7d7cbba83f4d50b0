// `diskformer ingest`: repacks a GGUF (a file or an http(s) URL) into a store directory (store.h) whose records
// are each one contiguous 4 KiB-aligned range.
//
// The source is read once, front to back, in windows; each window's bytes go to their places in data.bin. After
// every `checkpoint_every` bytes the data is fdatasync'd and only then the checkpoint (the source offset reached) is
// written durably, so an ingest killed at any point and run again continues from its last checkpoint and ends
// byte-identical to one that was never interrupted. manifest.json is written last: until it exists the store is
// not complete and Store::open refuses it.
//
// Existing contents of the directory:
//   - a complete store of the same source, unchanged, same layout: nothing to do;
//   - a store or an interrupted ingest of the same location whose contents changed (size, mtime, ETag, header):
//     started over, with a note of what changed. An interrupted one is resumed only after the source bytes its last
//     checkpoint covered (at most checkpoint_every) are read again and hash as they did: that catches a file
//     swapped under the same size and mtime, or on a server that sends neither ETag nor Last-Modified. Bytes
//     before that range are not read again (that would cost what resuming saves);
//   - a store or an interrupted ingest of another location or another layout version: refused, naming both,
//     unless `force`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "diskformer/store/source.h"
#include "diskformer/util/result.h"

namespace df::store {

struct IngestProgress {
  uint64_t done = 0;        // bytes of the source's tensor data copied so far (resumed ones included)
  uint64_t total = 0;
  uint64_t this_run = 0;    // of which copied by this run
  double seconds = 0;       // since this run started copying
  bool finished = false;
};

struct IngestOptions {
  std::string source;  // a GGUF path or an http(s) URL
  std::string dir;     // the store directory (created where missing)
  bool force = false;  // replace a store or an interrupted ingest of another source or layout
  uint64_t limit_rate = 0;                  // bytes per second read from the source; 0 = unlimited
  uint64_t checkpoint_every = 64ull << 20;  // bytes between durable checkpoints
  HttpOptions http;
  std::function<void(const IngestProgress&)> on_progress;  // after every window
  std::function<void(const std::string&)> on_note;         // one-line notes: resumed, started over, up to date
};

struct IngestResult {
  bool up_to_date = false;   // the store was already complete; nothing was copied
  bool resumed = false;      // continued an interrupted ingest
  uint64_t resumed_at = 0;   // bytes already done when this run started
  uint64_t copied = 0;       // bytes copied by this run
  uint64_t data_bytes = 0;   // size of data.bin
  uint64_t records = 0;      // expert, layer and table-row records in the store
  unsigned restarts = 0;     // times the source changed during this run and the ingest started over
  double seconds = 0;
};

Result<IngestResult> ingest(const IngestOptions& options);

}  // namespace df::store
