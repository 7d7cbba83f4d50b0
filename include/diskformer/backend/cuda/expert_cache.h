// The routed experts of a model streamed into GPU memory under a budget: a pool of N slots, each holding one
// (layer, expert) record — its gate, up and down matrices, in three device arrays of N equal strides, so that the
// routed-expert kernels read slot s exactly as they read expert s of a stacked tensor (pass slot ids for expert ids).
// The bookkeeping is the host pool's cache::SlotTable (LRU, pins, counters); the bytes come from a WeightSource:
// host RAM (pinned, so copies run as DMA at the link's speed), and below it the disk tier.
//
//   per MoE layer:  router ids -> host;  acquire(il, distinct experts) -> slots (misses copied on the cache's own
//                   stream; the compute stream waits for them by event);  kernels with slot ids;  release(compute).
//
// A slot's bytes are overwritten only after the kernels that last read it: release() records an event on the
// compute stream and the copy into a reused slot waits for it, so a copy never waits for compute it does not
// depend on (prefill's next group of experts loads while the current group computes).
//
// Admission by use count: the slots are a main part and a small spill part (two SlotTables, each LRU). A missed
// expert takes a main slot only when one is free or it has been used more recently-often than the main part's LRU
// victim (counts halve every few tokens' worth of lookups); otherwise it passes through the spill part. Decode
// visits every layer's experts in turn, a cycle far larger than a small cache: plain LRU would evict each expert
// just before its next use, where this keeps a stable, most used subset resident.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "diskformer/backend/cuda/buffer.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/cache/slot_table.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/util/result.h"

namespace df::cuda {

struct ExpertCacheStats {
  cache::CacheStats table;  // hits, misses, evictions; bytes_loaded = bytes copied from host RAM to the GPU
  double h2d_seconds = 0;   // the copy stream's busy time (events around each batch of copies)
  double h2d_GBps() const { return h2d_seconds > 0 ? double(table.bytes_loaded) / h2d_seconds / 1e9 : 0.0; }
};

class GpuExpertCache {
 public:
  // The layout of one record (types, rows, row sizes of gate, up, down), read from layer 0's expert 0 of `source`;
  // every layer must share it. `source` must outlive the cache. Errors: a layout the kernels cannot multiply, or
  // not enough GPU memory for the slots (with the sizes).
  static Result<std::unique_ptr<GpuExpertCache>> create(const model::ModelSpec& spec, model::WeightSource& source,
                                                        uint32_t slots);
  // Device bytes of one slot (gate + up + down, each rounded up to 256 bytes) for the layout of `source`.
  static Result<uint64_t> slot_bytes(const model::ModelSpec& spec, model::WeightSource& source);
  ~GpuExpertCache();
  GpuExpertCache(const GpuExpertCache&) = delete;
  GpuExpertCache& operator=(const GpuExpertCache&) = delete;

  uint32_t slots() const { return main_.size() + spill_.size(); }
  uint64_t slot_bytes() const { return gate_stride_ + up_stride_ + down_stride_; }
  // Slot 0's matrices; slot s starts at data + s * stride (MoeMatmulArgs' w and expert_stride).
  const DMat& gate() const { return gate_; }
  const DMat& up() const { return up_; }
  const DMat& down() const { return down_; }
  uint64_t gate_stride() const { return gate_stride_; }
  uint64_t up_stride() const { return up_stride_; }
  uint64_t down_stride() const { return down_stride_; }
  uint64_t device_bytes() const { return pool_.size(); }

  // Makes the distinct experts of layer il resident and pinned until release(): slots[i] holds experts[i]. Misses
  // are read from the source and copied on the cache's stream; `compute` waits for those copies. At most
  // slots() - (slots pinned by an earlier acquire without release) experts. Errors: the source's (a failed read).
  Status acquire(uint32_t il, std::span<const int32_t> experts, std::span<int32_t> slots, cudaStream_t compute);
  // The kernels reading the acquired slots are enqueued on `compute`: the slots become evictable, and a later copy
  // into one of them waits for those kernels.
  void release(cudaStream_t compute);

  // Whether layer il's expert e is in a slot now (no counting, no pin).
  bool contains(uint32_t il, int32_t e) const {
    const cache::Key key = uint64_t(il) * spec_.n_expert + uint32_t(e);
    for (const cache::SlotTable* t : {&main_, &spill_}) {
      const cache::SlotId s = t->find(key);
      if (s != cache::kNoSlot && t->state(s) == cache::SlotState::kReady) return true;
    }
    return false;
  }
  // Seconds per byte copied to the GPU so far, from copies already timed (no waiting); 0 before any.
  double h2d_s_per_byte() const {
    const uint64_t b = main_.stats().bytes_loaded + spill_.stats().bytes_loaded;
    return b && h2d_seconds_ > 0 ? h2d_seconds_ / double(b) : 0;
  }
  model::WeightSource& source() { return source_; }
  // Counters since creation or reset_stats(); waits for the copies in flight to time them.
  ExpertCacheStats stats();
  void reset_stats();

 private:
  GpuExpertCache(const model::ModelSpec& spec, model::WeightSource& source, uint32_t slots, uint32_t spill)
      : spec_(spec), source_(source), main_(slots - spill), spill_(spill), last_use_(slots, -1),
        uses_(uint64_t(spec.n_layer) * spec.n_expert, 0) {}
  Status copy_misses(uint32_t il, cudaStream_t compute);
  void collect_timing();
  // The table a missed key goes to (admission by use count), falling back to the other when all its slots are pinned.
  cache::SlotTable& admit(cache::Key key);

  static constexpr int kUseEvents = 16;  // ring of "kernels done with these slots" events on the compute stream

  model::ModelSpec spec_;
  model::WeightSource& source_;
  cache::SlotTable main_, spill_;  // slots [0, main) and [main, slots())
  DeviceBuffer pool_;  // [gate slots][up slots][down slots]
  DMat gate_, up_, down_;
  uint64_t gate_stride_ = 0, up_stride_ = 0, down_stride_ = 0;

  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t copy_start_ = nullptr, copy_done_ = nullptr;  // around the last batch of copies
  bool copies_in_flight_ = false;  // copy_start_/copy_done_ recorded and not yet timed
  std::array<cudaEvent_t, kUseEvents> use_events_{};
  int next_use_event_ = 0;
  std::vector<int> last_use_;  // per slot: the use event recorded after the kernels that last read it; -1 none
  std::vector<uint16_t> uses_;  // per key: acquires, halved every kDecayLookups lookups
  uint64_t lookups_ = 0;

  struct Held {
    cache::SlotHandle pin;
    cache::SlotId slot;  // in slots(): spill slots follow the main ones
  };
  struct Miss {
    cache::SlotTable* table;
    cache::SlotId local, slot;  // in its table, in slots()
    int32_t expert;
  };
  std::vector<Held> held_;  // pins of the current acquire
  std::vector<Miss> miss_;  // to copy
  double h2d_seconds_ = 0;
};

}  // namespace df::cuda
