// ffn_block's routed experts when they stream through the model's GPU expert cache. The router's choices come to
// the host (the one round trip of a layer); their experts are made resident in groups the cache can hold at once,
// and each group runs the kernels of resident experts with the cache's slots in place of expert ids.
//   - A few tokens whose experts fit in one group (decode): the fused two-launch path, ids replaced by slots
//     (fused_decode).
//   - Otherwise (prefill): the layer's distinct experts in groups of half the slots, so the copies of the next
//     group overlap the products of this one (the cache orders each copy after the kernels that last read its
//     slot). Each group multiplies only its (token, slot) pairs, from a plan built on the host, where the ids are.
//   - Decode with a CPU context (GpuSessionOptions::cpu_experts): of the experts missing from the cache, as many as
//     the measured rates say finish no later than the copies of the rest are computed on the CPU from host RAM while
//     the GPU copies and multiplies the others; their rows are combined and added after the GPU's (fused decode),
//     or join the GPU's rows before the combine, in routing order (the grouped path).
#include <algorithm>
#include <chrono>

#include "diskformer/backend/cuda/gpu_forward.h"
#include "diskformer/backend/cuda/pinned.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

// Grows a pinned host buffer to at least `bytes` (the stream must not be reading the old one).
void reserve_pinned(io::AlignedBuffer& b, uint64_t bytes) {
  if (b.size() >= bytes) return;
  auto r = io::AlignedBuffer::allocate(bytes, 64, pinned_host_allocator());
  DF_CHECK(r.ok());  // small (ids and plans of one batch); failing here means the host is out of locked memory
  b = std::move(*r);
}

void reserve_device(DeviceBuffer& b, uint64_t bytes) {
  if (b.size() < bytes) b = DeviceBuffer(bytes);
}

}  // namespace

void GpuSession::moe_streamed(GpuExpertCache& cache, uint32_t il, int64_t n, const uint8_t* xq, bool fused) {
  if (!stream_status_.ok()) return;  // an earlier layer's read failed: eval reports it
  const model::ModelSpec& s = model_.spec();
  const int K = int(s.n_expert_used);
  const int64_t nk = n * K, E = s.n_embd, F = s.n_ff_expert;
  const uint32_t slots = cache.slots();
  DF_CHECK(slots >= uint32_t(K));

  reserve_pinned(ids_host_, uint64_t(nk) * 4);
  int32_t* ids = reinterpret_cast<int32_t*>(ids_host_.data());
  DF_CUDA_CHECK(cudaMemcpyAsync(ids, ids_.data(), nk * 4, cudaMemcpyDeviceToHost, stream_));
  // The CPU's share needs the normed row too (the source's views must outlive this layer: RAM-resident experts).
  const bool split = n == 1 && opt_.cpu_experts != nullptr && cache.source().max_experts_per_call() == 0;
  if (split) {  // and the routing weights, for the CPU's rows and the GPU's share of the combine
    reserve_pinned(xn_host_, uint64_t(E) * 4);
    reserve_pinned(wts_host_, uint64_t(nk) * 4);
    DF_CUDA_CHECK(cudaMemcpyAsync(xn_host_.data(), xn_.data(), E * 4, cudaMemcpyDeviceToHost, stream_));
    DF_CUDA_CHECK(cudaMemcpyAsync(wts_host_.data(), wts_.data(), nk * 4, cudaMemcpyDeviceToHost, stream_));
  }
  DF_CUDA_CHECK(cudaStreamSynchronize(stream_));

  // The layer's distinct experts in first-use order, and each one's index in that list.
  where_.assign(s.n_expert, -1);
  distinct_.clear();
  for (int64_t v = 0; v < nk; ++v) {
    const int32_t e = ids[v];
    DF_CHECK(e >= 0 && uint32_t(e) < s.n_expert);
    if (where_[e] < 0) {
      where_[e] = int32_t(distinct_.size());
      distinct_.push_back(e);
    }
  }
  cpu_ids_.clear();
  if (split) take_cpu_share(cache, il);  // moves some missed experts from distinct_ to cpu_ids_
  const int64_t D = int64_t(distinct_.size());
  const int64_t G = D <= int64_t(slots) / 2 ? D : std::max<int64_t>(K, slots / 2);
  const int64_t n_groups = D ? (D + G - 1) / G : 0;  // none when the CPU takes every expert

  // Host plan regions, one per group: a group's copies to the device may still be pending while the next group's
  // plan is written. Each region: slot per (token, k) [nk], then order [nk] and tiles [1 + 3 * max_tiles].
  const int32_t ts = std::min({moe_tile_slots(cache.gate().type), moe_tile_slots(cache.up().type),
                               moe_tile_slots(cache.down().type)});
  const int64_t max_tiles = moe_max_tiles(nk, int32_t(slots), ts);
  // (fused_decode uses a region as the slot map, its weights and the CPU's weights: 3 nk.)
  const int64_t region = std::max(2 * nk + 1 + 3 * max_tiles, 3 * nk);
  reserve_pinned(plan_host_, uint64_t(std::max<int64_t>(n_groups, 1) * region) * 4);
  reserve_device(plan_dev_, uint64_t(region) * 4);
  int32_t* slot_dev = plan_dev_.as<int32_t>();
  int32_t* order_dev = slot_dev + nk;
  int32_t* tiles_dev = order_dev + nk;

  if (fused && n_groups <= 1) {
    fused_decode(cache, il, n, xq, ids, reinterpret_cast<int32_t*>(plan_host_.data()));
    return;
  }
  reserve_device(act_, uint64_t(nk) * F * 4);
  if (ts <= 8) reserve_device(gathered_, uint64_t(nk) * std::max(E, F) * 4);  // the warp-per-row path gathers
  reserve_device(xq_stream_, q8_scratch_bytes(gguf::GgmlType::Q8_0, E, n));
  quantize_q8_0({.x = xn_.as<float>(), .y = xq_stream_.as<uint8_t>(), .n_rows = n, .cols = E, .stream = stream_});

  for (int64_t g = 0; g < n_groups; ++g) {
    const int64_t g0 = g * G, g1 = std::min(D, g0 + G);
    group_slots_.resize(size_t(g1 - g0));
    Status st = cache.acquire(il, std::span<const int32_t>(distinct_.data() + g0, size_t(g1 - g0)), group_slots_,
                              stream_);
    if (!st.ok()) {
      stream_status_ = std::move(st);
      return;
    }
    int32_t* h = reinterpret_cast<int32_t*>(plan_host_.data()) + g * region;
    int32_t *h_slot = h, *h_order = h + nk, *h_tiles = h + 2 * nk;
    for (int64_t v = 0; v < nk; ++v) {
      const int32_t i = where_[ids[v]];
      h_slot[v] = i >= g0 && i < g1 ? group_slots_[size_t(i - g0)] : -1;
    }
    // The group's (token, k) pairs grouped by slot (a counting sort by their expert's index), cut into tiles of ts
    // (moe_plan's layout); the order is padded to nk with a valid index for the kernels that gather nk rows.
    first_.assign(size_t(g1 - g0) + 1, 0);
    for (int64_t v = 0; v < nk; ++v)
      if (h_slot[v] >= 0) ++first_[size_t(where_[ids[v]] - g0) + 1];
    for (size_t i = 1; i < first_.size(); ++i) first_[i] += first_[i - 1];
    const int64_t at = first_.back();
    fill_ = first_;
    for (int64_t v = 0; v < nk; ++v)
      if (h_slot[v] >= 0) h_order[fill_[size_t(where_[ids[v]] - g0)]++] = int32_t(v);
    int64_t nt = 0;
    for (int64_t i = 0; i < g1 - g0; ++i)
      for (int64_t t0 = first_[size_t(i)]; t0 < first_[size_t(i) + 1]; t0 += ts) {
        DF_CHECK(nt < max_tiles);
        h_tiles[1 + 3 * nt] = group_slots_[size_t(i)];
        h_tiles[2 + 3 * nt] = int32_t(t0);
        h_tiles[3 + 3 * nt] = int32_t(std::min<int64_t>(ts, first_[size_t(i) + 1] - t0));
        ++nt;
      }
    std::fill(h_order + at, h_order + nk, 0);
    h_tiles[0] = int32_t(nt);
    DF_CUDA_CHECK(cudaMemcpyAsync(order_dev, h_order, (nk + 1 + 3 * nt) * 4, cudaMemcpyHostToDevice, stream_));

    const MoeGroupedMatmulArgs gb{.n_expert = int32_t(slots), .order = order_dev, .tiles = tiles_dev,
                                  .n_slots = nk, .n_used = K, .gathered = gathered_.as<float>(),
                                  .scratch = scratch_.as<uint8_t>(), .stream = stream_, .tile_slots = ts};
    MoeGroupedMatmulArgs gp = gb, up = gb, dn = gb;
    gp.w = cache.gate(), gp.expert_stride = cache.gate_stride(), gp.x = xn_.as<float>(), gp.y = gate_.as<float>();
    up.w = cache.up(), up.expert_stride = cache.up_stride(), up.x = xn_.as<float>(), up.y = up_.as<float>();
    if (ts > 8) gp.x_q8 = up.x_q8 = xq_stream_.as<uint8_t>();
    moe_matmul_grouped(gp);
    moe_matmul_grouped(up);
    // Into act, not in place: rows of other groups are recomputed from unchanged gate and up, so running it over
    // every row per group leaves each group's rows right.
    swiglu({.gate = gate_.as<float>(), .up = up_.as<float>(), .y = act_.as<float>(), .n = nk * F, .stream = stream_});
    dn.w = cache.down(), dn.expert_stride = cache.down_stride(), dn.x = act_.as<float>(), dn.x_per_slot = true,
    dn.y = expert_out_.as<float>();
    moe_matmul_grouped(dn);
    cache.release(stream_);
  }
  if (!cpu_ids_.empty()) cpu_share(il, ids, K, /*packed=*/false);
  moe_combine({.expert_out = expert_out_.as<float>(), .weights = wts_.as<float>(), .out = proj_.as<float>(),
               .n_tok = n, .n_embd = E, .n_used = K, .stream = stream_});
  add({.x = x_.as<float>(), .y = proj_.as<float>(), .n = n * E, .stream = stream_});
}

// A few tokens whose GPU experts fit in one group: the fused two-launch path with slot ids. With a CPU share (one
// token), the CPU's experts point at a GPU slot of the same token with weight 0 in the fused combine (adding 0 keeps
// the sum), and their rows are combined and added afterwards.
void GpuSession::fused_decode(GpuExpertCache& cache, uint32_t il, int64_t n, const uint8_t* xq, const int32_t* ids,
                              int32_t* h) {
  const model::ModelSpec& s = model_.spec();
  const int K = int(s.n_expert_used);
  const int64_t nk = n * K, D = int64_t(distinct_.size());
  const bool share = !cpu_ids_.empty();
  int32_t* slot_dev = plan_dev_.as<int32_t>();
  float* wmod_dev = reinterpret_cast<float*>(slot_dev + nk);
  if (D > 0) {
    group_slots_.resize(size_t(D));
    Status st = cache.acquire(il, distinct_, group_slots_, stream_);
    if (!st.ok()) {
      stream_status_ = std::move(st);
      return;
    }
    int32_t* h_slot = h;
    float* h_wmod = reinterpret_cast<float*>(h + nk);
    const float* wts = reinterpret_cast<const float*>(wts_host_.data());
    for (int64_t v = 0; v < nk; ++v) {
      const int32_t i = where_[ids[v]];
      h_slot[v] = group_slots_[size_t(i >= 0 ? i : 0)];
      if (share) h_wmod[v] = i >= 0 ? wts[v] : 0.0f;
    }
    DF_CUDA_CHECK(cudaMemcpyAsync(slot_dev, h_slot, (share ? 2 : 1) * nk * 4, cudaMemcpyHostToDevice, stream_));
    uint8_t* act_q8 = up_.as<uint8_t>();
    const int32_t n_slots = int32_t(cache.slots());
    moe_decode_gate_up({.gate = cache.gate(), .up = cache.up(), .gate_stride = cache.gate_stride(),
                        .up_stride = cache.up_stride(), .n_expert = n_slots, .ids = slot_dev, .n_tok = n,
                        .n_used = K, .x_q8 = xq, .act_q8 = act_q8, .stream = stream_});
    moe_decode_down({.down = cache.down(), .down_stride = cache.down_stride(), .n_expert = n_slots, .ids = slot_dev,
                     .weights = share ? wmod_dev : wts_.as<float>(), .n_tok = n, .n_used = K, .act_q8 = act_q8,
                     .x = x_.as<float>(), .out = x_.as<float>(), .stream = stream_});
    cache.release(stream_);
  }
  if (!share) return;
  cpu_share(il, ids, K, /*packed=*/true);
  const int64_t C = int64_t(cpu_ids_.size()), E = s.n_embd;
  float* h_cw = reinterpret_cast<float*>(h + 2 * nk);
  float* cw_dev = reinterpret_cast<float*>(slot_dev + 2 * nk);
  const float* wts = reinterpret_cast<const float*>(wts_host_.data());
  for (int64_t c = 0; c < C; ++c) h_cw[c] = wts[std::find(ids, ids + K, cpu_ids_[size_t(c)]) - ids];
  DF_CUDA_CHECK(cudaMemcpyAsync(cw_dev, h_cw, C * 4, cudaMemcpyHostToDevice, stream_));
  moe_combine({.expert_out = expert_out_.as<float>(), .weights = cw_dev, .out = proj_.as<float>(), .n_tok = 1,
               .n_embd = E, .n_used = int(C), .stream = stream_});
  add({.x = x_.as<float>(), .y = proj_.as<float>(), .n = E, .stream = stream_});
}

// Chooses the CPU's share of one token's experts: of those missing from the cache (they would be copied), the last
// c in routing order, with c minimizing max(c * CPU time per expert, (misses - c) * copy time per expert) from the
// rates measured so far (ties: fewer on the CPU).
void GpuSession::take_cpu_share(GpuExpertCache& cache, uint32_t il) {
  std::vector<int32_t> missed;
  for (int32_t e : distinct_)
    if (!cache.contains(il, e)) missed.push_back(e);
  const double bytes = double(cache.slot_bytes());
  const double gpu = bytes * (cache.h2d_s_per_byte() > 0 ? cache.h2d_s_per_byte() : 1.0 / 50e9);
  const double cpu = bytes * cpu_s_per_byte_;
  const int64_t M = int64_t(missed.size());
  int64_t best = 0;
  for (int64_t c = 1; c <= M; ++c)
    if (std::max(c * cpu, (M - c) * gpu) < std::max(best * cpu, (M - best) * gpu)) best = c;
  cpu_ids_.assign(missed.end() - best, missed.end());
  for (int32_t e : cpu_ids_) {
    distinct_.erase(std::find(distinct_.begin(), distinct_.end(), e));
    where_[e] = -1;
  }
  for (size_t i = 0; i < distinct_.size(); ++i) where_[distinct_[i]] = int32_t(i);
}

// The CPU's share of a decode step (one token): gate, up, SwiGLU and down of each expert in cpu_ids_ from host RAM,
// as the CPU engine computes them; the rows go to expert_out_ behind the GPU's work on the same stream, at their
// routing positions, or packed in cpu_ids_ order.
void GpuSession::cpu_share(uint32_t il, const int32_t* ids, int K, bool packed) {
  const model::ModelSpec& s = model_.spec();
  const int64_t E = s.n_embd, F = s.n_ff_expert, C = int64_t(cpu_ids_.size());
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::vector<model::ExpertWeights>> ew = model_.expert_cache()->source().experts(il, cpu_ids_);
  if (!ew) {
    stream_status_ = ew.take_error();
    return;
  }
  cpu_gate_.resize(size_t(C * F));
  cpu_up_.resize(size_t(C * F));
  reserve_pinned(cpu_out_host_, uint64_t(K) * E * 4);
  const float* xn = reinterpret_cast<const float*>(xn_host_.data());
  float* out = reinterpret_cast<float*>(cpu_out_host_.data());
  std::vector<cpu::MatmulJob> jobs;
  for (int64_t c = 0; c < C; ++c) {
    jobs.push_back({&(*ew)[c].gate, xn, 1, cpu_gate_.data() + c * F});
    jobs.push_back({&(*ew)[c].up, xn, 1, cpu_up_.data() + c * F});
  }
  cpu::matmul_many(*opt_.cpu_experts, jobs);
  cpu::swiglu(cpu_gate_.data(), cpu_up_.data(), C * F, cpu_gate_.data());
  jobs.clear();
  for (int64_t c = 0; c < C; ++c) jobs.push_back({&(*ew)[c].down, cpu_gate_.data() + c * F, 1, out + c * E});
  cpu::matmul_many(*opt_.cpu_experts, jobs);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t bytes = 0;
  for (const model::ExpertWeights& w : *ew)
    for (const model::Mat* m : {&w.gate, &w.up, &w.down}) bytes += m->row_bytes * uint64_t(m->rows);
  cpu_s_per_byte_ = 0.75 * cpu_s_per_byte_ + 0.25 * dt / double(bytes);
  cpu_expert_count_ += uint64_t(C);
  if (packed) {
    DF_CUDA_CHECK(cudaMemcpyAsync(expert_out_.as<float>(), out, C * E * 4, cudaMemcpyHostToDevice, stream_));
    return;
  }
  for (int64_t c = 0; c < C; ++c) {
    const int64_t k = std::find(ids, ids + K, cpu_ids_[size_t(c)]) - ids;
    DF_CHECK(k < K);
    DF_CUDA_CHECK(cudaMemcpyAsync(expert_out_.as<float>() + k * E, out + c * E, E * 4, cudaMemcpyHostToDevice,
                                  stream_));
  }
}

}  // namespace df::cuda
