#include "backend/cuda/experts.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <utility>

#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/cudart/check.h"
#include "diskformer/cudart/pinned.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

// Grows a pinned host buffer to at least `bytes` (the stream must not be reading the old one).
void reserve_pinned(io::AlignedBuffer& b, uint64_t bytes) {
  if (b.size() >= bytes) return;
  auto r = io::AlignedBuffer::allocate(bytes, 64, pinned_host_allocator());
  DF_CHECK(r.ok());  // small (ids and plans of one batch); failing here means the host is out of locked memory
  // Kernels read and write these in place (fetch, the combine of the CPU's rows): under unified addressing a pinned
  // block's device address is its host address.
  cudaPointerAttributes a{};
  DF_CUDA_CHECK(cudaPointerGetAttributes(&a, r->data()));
  DF_CHECK(a.devicePointer == r->data());
  b = std::move(*r);
}

// Adds the seconds from its making to its end to `to`.
class AddSeconds {
 public:
  explicit AddSeconds(double& to) : to_(to), t0_(std::chrono::steady_clock::now()) {}
  ~AddSeconds() { to_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  AddSeconds(const AddSeconds&) = delete;
  AddSeconds& operator=(const AddSeconds&) = delete;

 private:
  double& to_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

RoutedExperts::RoutedExperts(const GpuModel& m, std::vector<DeviceBuffer>& buf, bool grouped, uint32_t max_batch)
    : m_(m), buf_(buf), grouped_(grouped), glu_(m.spec.family == model::Family::kGemma4 ? Glu::kGelu : Glu::kSilu) {
  if (!m.streamed) return;
  DF_CUDA_CHECK(cudaEventCreateWithFlags(&fetched_event_, cudaEventDisableTiming));
  const uint64_t nk = uint64_t(max_batch) * m.spec.n_expert_used;
  reserve_pinned(ids_host_, (nk + m.spec.n_expert_used) * 4);
  if (m.streamed->cpu == nullptr) return;
  reserve_pinned(xn_host_, uint64_t(max_batch) * m.spec.n_embd * 4);
  reserve_pinned(wts_host_, nk * 4);
}

RoutedExperts::~RoutedExperts() {
  if (fetched_event_) cudaEventDestroy(fetched_event_);
}

void RoutedExperts::fetched() {
  if (!m_.streamed) return;
  DF_CUDA_CHECK(cudaEventRecord(fetched_event_, m_.stream));
  fetched_pending_ = true;
}

void RoutedExperts::guess(const GpuLayer& next, int64_t n) {
  if (!guessing(n)) return;
  const model::ModelSpec& s = m_.spec;
  const int64_t E = s.n_embd, X = s.n_expert, K = s.n_expert_used;
  float* g = at<float>(Buf::guess);
  float* logits = g + E;
  int32_t* ids = reinterpret_cast<int32_t*>(g + E + X);
  // The router's input as the layer computes it: gemma4's norm(x) / sqrt(E) * router_scale, else the FFN's norm.
  const bool gemma4 = s.family == model::Family::kGemma4;
  rms_norm({.x = at<float>(Buf::x), .weight = gemma4 ? next.router_scale.f32() : next.ffn_norm.f32(), .y = g,
            .n_rows = 1, .cols = E, .eps = s.norm_eps, .stream = m_.stream,
            .scale = gemma4 ? 1.0f / std::sqrt(float(E)) : 1.0f});
  matmul({.w = next.gate_inp, .x = g, .n_tok = 1, .y = logits, .scratch = at<uint8_t>(Buf::scratch),
          .stream = m_.stream});
  route({.logits = logits, .n_tok = 1, .n_expert = int(X), .n_used = int(K), .norm_topk = s.norm_topk, .ids = ids,
         .weights = reinterpret_cast<float*>(ids + K), .stream = m_.stream});
}

void RoutedExperts::fetch(uint32_t il, int64_t n) {
  if (!m_.streamed) return;
  const model::ModelSpec& s = m_.spec;
  const int64_t nk = n * s.n_expert_used, E = s.n_embd, X = s.n_expert;
  DF_CHECK(ids_host_.size() >= uint64_t(nk + s.n_expert_used) * 4);  // n within the max_batch it was sized for
  int32_t* ids = reinterpret_cast<int32_t*>(ids_host_.data());
  // One launch that writes into the pinned host buffers, where copies would be a node each in a captured segment.
  CopySpansArgs c{.stream = m_.stream};
  c.spans[0] = {at<int32_t>(Buf::ids), ids, nk * 4};
  if (guessing(n) && il + 1 < s.n_layer) c.spans[1] = {at<float>(Buf::guess) + E + X, ids + nk, s.n_expert_used * 4};
  // Decode steps (one sequence's token or a token of each of several): the CPU may share the misses, and needs the
  // normed rows and the routing weights too.
  if (splits(n)) {
    c.spans[2] = {at<float>(Buf::xn), xn_host_.data(), n * E * 4};
    c.spans[3] = {at<float>(Buf::wts), wts_host_.data(), nk * 4};
  }
  copy_spans(c);
}

void RoutedExperts::run(const GpuLayer& l, uint32_t il, int64_t n, const uint8_t* xq, bool fused, float* out) {
  DF_CHECK(out != at<float>(Buf::proj) && out != at<float>(Buf::x));  // the combine's output; the residual stream
  if (m_.streamed) {
    streamed(il, n, xq, fused, out);
  } else {
    resident(l, n, xq, fused, out);
  }
}

model::ExpertWeights RoutedExperts::matrices(const GpuLayer& l, uint32_t il) const {
  if (!m_.streamed) return {l.gate_exps, l.up_exps, l.down_exps};
  const model::ExpertLayout& x = m_.streamed->layouts->experts[il];
  const cache::DeviceTier& t = *m_.streamed->gpu;
  return {x.gate.at(t.plane(0)), x.up.at(t.plane(1)), x.down.at(t.plane(2))};
}

void RoutedExperts::combine(const float* weights, int64_t n, int n_used, float* out, bool accumulate,
                            const float* rows) {
  moe_combine({.expert_out = rows ? rows : at<float>(Buf::expert_out), .weights = weights,
               .out = out ? out : at<float>(Buf::x), .n_tok = n, .n_embd = m_.spec.n_embd, .n_used = n_used,
               .stream = m_.stream, .accumulate = out == nullptr || accumulate});
}

void RoutedExperts::decode_gate_up(const model::ExpertWeights& w, uint64_t gate_stride, uint64_t up_stride,
                                   int32_t n_expert, const int32_t* ids, int64_t n, const uint8_t* xq) {
  const int K = int(m_.spec.n_expert_used);
  // up holds the experts' Q8_0 activations ([n * K][n_ff_expert / 32] blocks, fewer bytes than its floats).
  moe_decode_gate_up({.gate = w.gate, .up = w.up, .gate_stride = gate_stride, .up_stride = up_stride,
                      .n_expert = n_expert, .ids = ids, .n_tok = n, .n_used = K, .x_q8 = xq,
                      .act = moe_decode_down_supported(w.down, n, K) ? nullptr : at<float>(Buf::gate),
                      .act_q8 = at<uint8_t>(Buf::up), .stream = m_.stream, .glu = glu_});
}

void RoutedExperts::decode_down(const model::Mat& down, uint64_t stride, int32_t n_expert, const int32_t* ids,
                                const float* weights, int64_t n, float* out) {
  const int K = int(m_.spec.n_expert_used);
  if (moe_decode_down_supported(down, n, K)) {
    float* x = at<float>(Buf::x);
    moe_decode_down({.down = down, .down_stride = stride, .n_expert = n_expert, .ids = ids, .weights = weights,
                     .n_tok = n, .n_used = K, .act_q8 = at<uint8_t>(Buf::up), .x = out ? nullptr : x,
                     .out = out ? out : x, .stream = m_.stream});
    return;
  }
  moe_matmul({.w = down, .expert_stride = stride, .n_expert = n_expert, .ids = ids, .n_tok = n, .n_used = K,
              .x = at<float>(Buf::gate), .x_per_slot = true, .y = at<float>(Buf::expert_out),
              .scratch = at<uint8_t>(Buf::scratch), .stream = m_.stream});
  combine(weights, n, K, out);
}

void RoutedExperts::resident(const GpuLayer& l, int64_t n, const uint8_t* xq, bool fused, float* out) {
  const model::ModelSpec& s = m_.spec;
  const int K = int(s.n_expert_used);
  int32_t* ids = at<int32_t>(Buf::ids);
  if (fused) {
    decode_gate_up({l.gate_exps, l.up_exps, l.down_exps}, l.gate_stride, l.up_stride, int32_t(s.n_expert), ids, n, xq);
    decode_down(l.down_exps, l.down_stride, int32_t(s.n_expert), ids, at<float>(Buf::wts), n, out);
    return;
  }
  const float* xn = at<float>(Buf::xn);
  uint8_t* scratch = at<uint8_t>(Buf::scratch);
  float *gate = at<float>(Buf::gate), *up = at<float>(Buf::up);
  if (grouped_ && n > 1) {
    const int64_t n_slots = n * K;
    // Quantized experts take tiles of 32 slots on the tensor cores (tiles is sized for 8, which needs the most).
    const int32_t ts = std::min({moe_tile_slots(l.gate_exps.type), moe_tile_slots(l.up_exps.type),
                                 moe_tile_slots(l.down_exps.type)});
    moe_plan({.ids = ids, .n_slots = n_slots, .n_expert = int32_t(s.n_expert), .order = at<int32_t>(Buf::order),
              .tiles = at<int32_t>(Buf::tiles), .stream = m_.stream, .tile_slots = ts});
    const MoeGroupedMatmulArgs gb{.n_expert = int32_t(s.n_expert), .order = at<int32_t>(Buf::order),
                                  .tiles = at<int32_t>(Buf::tiles), .n_slots = n_slots, .n_used = K,
                                  .gathered = at<float>(Buf::gathered), .scratch = scratch, .stream = m_.stream,
                                  .tile_slots = ts};
    MoeGroupedMatmulArgs g = gb, u = gb, d = gb;
    g.w = l.gate_exps, g.expert_stride = l.gate_stride, g.x = xn, g.y = gate;
    u.w = l.up_exps, u.expert_stride = l.up_stride, u.x = xn, u.y = up;
    // Tensor cores: gate and up read the same Q8_0 rows of xn, one per token (the warp kernels of the other types
    // gather and quantize their inputs in scratch themselves).
    if (ts > 8 && int8_mma_type(l.gate_exps.type) && int8_mma_type(l.up_exps.type)) {
      quantize_q8_0({.x = xn, .y = scratch, .n_rows = n, .cols = int64_t(s.n_embd), .stream = m_.stream});
      g.x_q8 = u.x_q8 = scratch;
    }
    moe_matmul_grouped(g);
    moe_matmul_grouped(u);
    glu({.gate = gate, .up = up, .y = gate, .n = n_slots * int64_t(s.n_ff_expert), .stream = m_.stream, .act = glu_});
    d.w = l.down_exps, d.expert_stride = l.down_stride, d.x = gate, d.x_per_slot = true,
    d.y = at<float>(Buf::expert_out);
    moe_matmul_grouped(d);
  } else {
    ungrouped(l, n);
  }
  combine(at<float>(Buf::wts), n, K, out);
}

// One (token, slot) per block column: batches without grouped experts.
void RoutedExperts::ungrouped(const GpuLayer& l, int64_t n) {
  const model::ModelSpec& s = m_.spec;
  const int K = int(s.n_expert_used);
  const float* xn = at<float>(Buf::xn);
  float *gate = at<float>(Buf::gate), *up = at<float>(Buf::up);
  const MoeMatmulArgs base{.n_expert = int32_t(s.n_expert), .ids = at<int32_t>(Buf::ids), .n_tok = n, .n_used = K,
                           .scratch = at<uint8_t>(Buf::scratch), .stream = m_.stream};
  MoeMatmulArgs g = base, u = base, d = base;
  g.w = l.gate_exps, g.expert_stride = l.gate_stride, g.x = xn, g.y = gate;
  u.w = l.up_exps, u.expert_stride = l.up_stride, u.x = xn, u.y = up;
  moe_matmul(g);
  moe_matmul(u);
  glu({.gate = gate, .up = up, .y = gate, .n = n * K * int64_t(s.n_ff_expert), .stream = m_.stream, .act = glu_});
  d.w = l.down_exps, d.expert_stride = l.down_stride, d.x = gate, d.x_per_slot = true, d.y = at<float>(Buf::expert_out);
  moe_matmul(d);
}

void RoutedExperts::streamed(uint32_t il, int64_t n, const uint8_t* xq, bool fused, float* out) {
  const bool fetch_only = std::exchange(fetched_pending_, false);
  if (!status_.ok()) return;  // an earlier layer's read failed: eval reports it
  const AddSeconds whole(times_.total_s);
  const model::ModelSpec& s = m_.spec;
  const StreamedExperts& st = *m_.streamed;
  cache::DeviceTier& tier = *st.gpu;
  cache::RecordTier& ram = *st.ram;
  const int K = int(s.n_expert_used);
  const int64_t nk = n * K, E = s.n_embd, F = s.n_ff_expert, X = s.n_expert;
  const uint32_t slots = tier.slots();
  DF_CHECK(slots >= uint32_t(K));
  cudaStream_t stream = m_.stream;

  // The router's choices (and the next layer's guess), fetched: the layer's one round trip.
  const bool guessed = guessing(n) && il + 1 < s.n_layer;
  const bool split = splits(n);
  const int32_t* ids = reinterpret_cast<const int32_t*>(ids_host_.data());
  {
    const AddSeconds wait(times_.gpu_wait_s);
    if (fetch_only) {
      DF_CUDA_CHECK(cudaEventSynchronize(fetched_event_));
    } else {
      DF_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
  }

  const model::ExpertLayout& layout = st.layouts->experts[il];
  const uint32_t next = il + 1;
  const double copy_s_per_byte = tier.copy_s_per_byte() > 0 ? tier.copy_s_per_byte() : model::kCopyGuessSPerByte;
  int32_t max_prefetch = 0;
  if (guessed) {
    // The link is idle from the end of a layer's copies (its own and its reads ahead) to the next layer's: reads
    // ahead that fit there delay nothing. A layer's cycle ends at the next round trip (a token's first layer starts
    // a new cycle).
    const auto now = std::chrono::steady_clock::now();
    if (il > 0 && round_trip_ != std::chrono::steady_clock::time_point{}) {
      const double cycle = std::chrono::duration<double>(now - round_trip_).count();
      idle_link_s_ = 0.75 * idle_link_s_ + 0.25 * std::max(0.0, cycle - link_s_);
    }
    round_trip_ = now;
    const double record_s = double(st.layouts->experts[next].record_bytes) * copy_s_per_byte;
    max_prefetch = int32_t(std::min<double>(K, idle_link_s_ / record_s));
  }
  model::schedule_moe(
      {.ids = std::span<const int32_t>(ids, size_t(nk)), .n_tok = int32_t(n), .n_used = K, .n_expert = int32_t(X),
       // moe_plan sorts a group of at most 1024 members.
       .max_group = std::min<uint32_t>(slots, 2048), .overlap = true, .cpu_share = split,
       .resident = [&](int32_t e) { return tier.contains(il, e); },
       .in_ram = ram.resident() ? nullptr : std::function<bool(int32_t)>([&](int32_t e) { return ram.contains(il, e); }),
       .record_bytes = layout.record_bytes, .copy_s_per_byte = tier.copy_s_per_byte(),
       .cpu_s_per_byte = cpu_rate_.s_per_byte(),
       // Every couple of tokens without a share, one expert measures the CPU's rate again (and the layer after
       // that measure, warm).
       .min_cpu = split && (since_cpu_ >= 2 * s.n_layer || warm_sample_due_) ? 1 : 0,
       .guess = guessed ? std::span<const int32_t>(ids + nk, size_t(K)) : std::span<const int32_t>(),
       .max_prefetch_compute = max_prefetch,
       .next_resident = [&](int32_t e) { return tier.contains(next, e); },
       .next_in_ram =
           ram.resident() ? nullptr : std::function<bool(int32_t)>([&](int32_t e) { return ram.contains(next, e); })},
      schedule_);
  if (split && schedule_.missed > 1) since_cpu_ = schedule_.cpu.empty() ? since_cpu_ + 1 : 0;
  if (guessed) {
    // The link's work of this layer's cycle: its own copies and the reads ahead into the next.
    const int64_t copied = schedule_.missed - int64_t(schedule_.cpu.size());
    link_s_ = (double(copied) * double(layout.record_bytes) +
               double(schedule_.prefetch_compute.size()) * double(st.layouts->experts[next].record_bytes)) *
              copy_s_per_byte;
  }
  if (!schedule_.cpu.empty()) warm_sample_due_ = false;  // cpu_share says whether this one was
  auto read_ahead = [&] {
    if (!schedule_.prefetch_compute.empty()) tier.prefetch(next, schedule_.prefetch_compute);
    if (!schedule_.prefetch_ram.empty()) ram.prefetch(next, schedule_.prefetch_ram);
  };
  const size_t n_groups = schedule_.groups.size();
  // Host plan regions, one per group: a group's copies to the device may still be pending while the next group's
  // plan is written. A region: each pair's index in the group [nk] and the group's slots [<= nk]; fused decode: the
  // slot map, its weights and the CPU's weights [3 nk].
  const int64_t region = 3 * nk;
  reserve_pinned(plan_host_, uint64_t(std::max<size_t>(n_groups, 1) * region) * 4);
  if (fused && n_groups <= 1) {
    fused_decode(il, n, xq, ids, reinterpret_cast<int32_t*>(plan_host_.data()), out);
    if (n_groups == 0) read_ahead();
    return;
  }
  const model::ExpertWeights w = matrices(GpuLayer{}, il);
  const int32_t ts = std::min({moe_tile_slots(w.gate.type), moe_tile_slots(w.up.type), moe_tile_slots(w.down.type)});
  quantize_q8_0({.x = at<float>(Buf::xn), .y = at<uint8_t>(Buf::xq_stream), .n_rows = n, .cols = E, .stream = stream});
  int32_t* local_dev = at<int32_t>(Buf::plan);
  int32_t* slot_of_dev = local_dev + nk;
  int32_t* order_dev = local_dev + 2 * nk;
  int32_t* tiles_dev = local_dev + 3 * nk;
  for (size_t g = 0; g < n_groups; ++g) {
    const auto [g0, g1] = schedule_.groups[g];
    const std::span<const int32_t> members(schedule_.gpu.data() + g0, size_t(g1 - g0));
    Result<cache::Pins> pins = tier.acquire(il, members);
    if (!pins) {
      status_ = pins.take_error();
      return;
    }
    if (g == 0) read_ahead();
    int32_t* h = reinterpret_cast<int32_t*>(plan_host_.data()) + int64_t(g) * region;
    for (int64_t v = 0; v < nk; ++v) {
      const int32_t i = schedule_.where[size_t(ids[v])];
      h[v] = i >= g0 && i < g1 ? i - g0 : -1;
    }
    for (size_t i = 0; i < members.size(); ++i) h[nk + int64_t(i)] = int32_t(pins->slot(i));
    DF_CUDA_CHECK(cudaMemcpyAsync(local_dev, h, (nk + members.size()) * 4, cudaMemcpyHostToDevice, stream));
    moe_plan({.ids = local_dev, .n_slots = nk, .n_expert = int32_t(members.size()), .order = order_dev,
              .tiles = tiles_dev, .stream = stream, .tile_slots = ts, .slot_of = slot_of_dev});
    const MoeGroupedMatmulArgs gb{.n_expert = int32_t(slots), .order = order_dev, .tiles = tiles_dev, .n_slots = nk,
                                  .n_used = K, .gathered = at<float>(Buf::gathered),
                                  .scratch = at<uint8_t>(Buf::scratch), .stream = stream, .tile_slots = ts};
    MoeGroupedMatmulArgs gp = gb, up = gb, dn = gb;
    gp.w = w.gate, gp.expert_stride = tier.stride(0), gp.x = at<float>(Buf::xn), gp.y = at<float>(Buf::gate);
    up.w = w.up, up.expert_stride = tier.stride(1), up.x = at<float>(Buf::xn), up.y = at<float>(Buf::up);
    if (ts > 8) gp.x_q8 = up.x_q8 = at<uint8_t>(Buf::xq_stream);
    moe_matmul_grouped(gp);
    moe_matmul_grouped(up);
    // Into act, not in place: rows of other groups are recomputed from unchanged gate and up, so running it over
    // every row per group leaves each group's rows right.
    glu({.gate = at<float>(Buf::gate), .up = at<float>(Buf::up), .y = at<float>(Buf::act), .n = nk * F,
         .stream = stream, .act = glu_});
    dn.w = w.down, dn.expert_stride = tier.stride(2), dn.x = at<float>(Buf::act), dn.x_per_slot = true,
    dn.y = at<float>(Buf::expert_out);
    moe_matmul_grouped(dn);
    pins->release();  // after the kernels that read the slots, in stream order
  }
  if (n_groups == 0) read_ahead();
  if (!schedule_.cpu.empty()) cpu_share(il, ids, n, /*packed_weights=*/nullptr);
  combine(at<float>(Buf::wts), n, K, out);
}

// A few tokens whose GPU experts fit in one group: the fused two-launch path with slot ids. With a CPU share, the
// CPU's (token, slot) pairs point at a GPU slot with weight 0 in the fused combine (adding 0 keeps the sum), and
// their rows are combined and added afterwards (written, where out is set and the GPU has none). Where RAM holds every
// record, the GPU's copies and launches are queued while the pool's other threads start the CPU's share.
void RoutedExperts::fused_decode(uint32_t il, int64_t n, const uint8_t* xq, const int32_t* ids, int32_t* h,
                                 float* out) {
  const model::ModelSpec& s = m_.spec;
  const StreamedExperts& st = *m_.streamed;
  cudaStream_t stream = m_.stream;
  const int K = int(s.n_expert_used);
  const int64_t nk = n * K;
  const bool share = !schedule_.cpu.empty();
  int32_t* slot_dev = at<int32_t>(Buf::plan);
  float* wmod_dev = reinterpret_cast<float*>(slot_dev + nk);
  const float* wts = reinterpret_cast<const float*>(wts_host_.data());
  auto gpu = [&] {
    if (schedule_.gpu.empty()) return;
    Result<cache::Pins> pins = st.gpu->acquire(il, schedule_.gpu);
    if (!pins) {
      status_ = pins.take_error();
      return;
    }
    if (!schedule_.prefetch_compute.empty()) st.gpu->prefetch(il + 1, schedule_.prefetch_compute);
    if (!schedule_.prefetch_ram.empty()) st.ram->prefetch(il + 1, schedule_.prefetch_ram);
    float* h_wmod = reinterpret_cast<float*>(h + nk);
    for (int64_t v = 0; v < nk; ++v) {
      const int32_t i = schedule_.where[size_t(ids[v])];
      h[v] = int32_t(pins->slot(size_t(i >= 0 ? i : 0)));
      if (share) h_wmod[v] = i >= 0 ? wts[v] : 0.0f;
    }
    DF_CUDA_CHECK(cudaMemcpyAsync(slot_dev, h, (share ? 2 : 1) * nk * 4, cudaMemcpyHostToDevice, stream));
    const model::ExpertWeights w = matrices(GpuLayer{}, il);
    const cache::DeviceTier& tier = *st.gpu;
    const int32_t n_slots = int32_t(tier.slots());
    decode_gate_up(w, tier.stride(0), tier.stride(1), n_slots, slot_dev, n, xq);
    decode_down(w.down, tier.stride(2), n_slots, slot_dev, share ? wmod_dev : at<float>(Buf::wts), n, out);
    pins->release();
  };
  // Beside the CPU's share only where RAM holds every record: elsewhere the GPU's copies may first read records from
  // disk, which the CPU's share (and the rate measured from it) must not wait through.
  const bool beside = share && st.ram->resident();
  if (!beside) {
    gpu();
    if (!share || !status_.ok()) return;
  }
  // The CPU's rows and their weights stay in pinned host memory, where the combine reads them.
  float* h_cw = reinterpret_cast<float*>(h + 2 * nk);
  const int64_t width = cpu_share(il, ids, n, h_cw, beside ? std::function<void()>(gpu) : nullptr);
  if (!status_.ok()) return;  // its experts could not be read: eval reports it
  combine(h_cw, n, int(width), out, /*accumulate=*/!schedule_.gpu.empty(),
          reinterpret_cast<const float*>(cpu_out_host_.data()));
}

int64_t RoutedExperts::cpu_share(uint32_t il, const int32_t* ids, int64_t n, float* packed_weights,
                                 const std::function<void()>& beside) {
  const model::ModelSpec& s = m_.spec;
  const StreamedExperts& st = *m_.streamed;
  const int K = int(s.n_expert_used);
  const int64_t E = s.n_embd, nk = n * K, C = int64_t(schedule_.cpu.size());
  const auto t0 = std::chrono::steady_clock::now();
  Result<cache::Pins> pins = st.ram->acquire(il, schedule_.cpu);
  if (!pins) {
    status_ = pins.take_error();
    return 0;  // beside is not run: the pass ends here
  }
  // The CPU's (token, slot) pairs v = t * K + k, expert by expert, each expert's in routing order: [first[c],
  // first[c + 1]) of pairs_ are expert c's.
  const model::ExpertLayout& layout = st.layouts->experts[il];
  std::vector<model::ExpertWeights> ew;
  std::vector<int64_t> first = {0};
  pairs_.clear();
  double weighted_bytes = 0;
  for (int64_t c = 0; c < C; ++c) {
    ew.push_back(model::expert_at(layout, pins->data(size_t(c))));
    for (int64_t v = 0; v < nk; ++v)
      if (ids[v] == schedule_.cpu[size_t(c)]) pairs_.push_back(v);
    weighted_bytes += double(layout.record_bytes) * model::cpu_rows_weight(int64_t(pairs_.size()) - first.back());
    first.push_back(int64_t(pairs_.size()));
  }
  const int64_t P = int64_t(pairs_.size());
  // Where each pair's row goes: packed, [n][width] rows, each token's pairs in routing order (width: the most any
  // token has; zero rows of weight 0 pad the others); else in routing order (in_order), to be copied to its place
  // in expert_out. dest[p] indexes those rows.
  std::vector<int64_t> per_tok(static_cast<size_t>(n), 0), dest(static_cast<size_t>(P)), in_order;
  int64_t width = 0;
  {
    std::vector<int64_t> at_v(size_t(nk), -1);
    for (int64_t v = 0; v < nk; ++v) {
      if (schedule_.where[size_t(ids[v])] >= 0) continue;
      at_v[size_t(v)] = packed_weights ? per_tok[size_t(v / K)]++ : int64_t(in_order.size());
      in_order.push_back(v);
      width = std::max(width, per_tok[size_t(v / K)]);
    }
    for (int64_t p = 0; p < P; ++p) {
      const int64_t v = pairs_[size_t(p)];
      dest[size_t(p)] = packed_weights ? v / K * width + at_v[size_t(v)] : at_v[size_t(v)];
    }
  }
  const int64_t rows = packed_weights ? n * width : P;
  // One token: every expert reads its one normed row, and its rows already lie in routing order (dest is p). Several:
  // each pair's token row, and the rows rearranged.
  const bool one = n == 1;
  const float* xn = reinterpret_cast<const float*>(xn_host_.data());
  if (!one) {
    cpu_in_.resize(size_t(P * E));
    for (int64_t p = 0; p < P; ++p)
      std::copy_n(xn + pairs_[size_t(p)] / K * E, E, cpu_in_.data() + p * E);
    cpu_rows_.resize(size_t(P * E));
  }
  reserve_pinned(cpu_out_host_, uint64_t(std::max<int64_t>(rows, 1)) * E * 4);
  float* out = reinterpret_cast<float*>(cpu_out_host_.data());
  cpu::expert_products(*st.cpu, ew, first, one ? xn : cpu_in_.data(), one ? out : cpu_rows_.data(), cpu_scratch_,
                       glu_ == Glu::kGelu ? cpu::GateActivation::kGeGlu : cpu::GateActivation::kSwiGlu,
                       /*shared_in=*/one, /*cuda_order=*/true, beside);
  const auto t1 = std::chrono::steady_clock::now();
  const double took_s = std::chrono::duration<double>(t1 - t0).count();
  times_.cpu_s += took_s;
  // The pool's threads still spin if the last share ended less than their spin time ago.
  const bool warm = t0 - cpu_done_ < cpu::ThreadPool::kSpinTime;
  cpu_rate_.add(took_s, uint64_t(weighted_bytes), warm);
  warm_sample_due_ = !warm;
  cpu_done_ = t1;
  cpu_count_ += uint64_t(C);
  if (!one) {
    if (packed_weights) std::fill_n(out, rows * E, 0.0f);
    for (int64_t p = 0; p < P; ++p)
      std::copy_n(cpu_rows_.data() + p * E, E, out + dest[size_t(p)] * E);
  }
  if (packed_weights) {
    const float* wts = reinterpret_cast<const float*>(wts_host_.data());
    std::fill_n(packed_weights, rows, 0.0f);
    for (int64_t p = 0; p < P; ++p) packed_weights[dest[size_t(p)]] = wts[pairs_[size_t(p)]];
    return width;
  }
  // Rows in routing order to their pairs' places, a copy per run of adjacent pairs.
  float* expert_out = at<float>(Buf::expert_out);
  for (int64_t r0 = 0, r1; r0 < P; r0 = r1) {
    for (r1 = r0 + 1; r1 < P && in_order[size_t(r1)] == in_order[size_t(r1 - 1)] + 1;) ++r1;
    DF_CUDA_CHECK(cudaMemcpyAsync(expert_out + in_order[size_t(r0)] * E, out + r0 * E, (r1 - r0) * E * 4,
                                  cudaMemcpyHostToDevice, m_.stream));
  }
  return 0;
}

}  // namespace df::cuda
