// The CUDA backend of engine::Model: the weights uploaded from the GGUF or store (through the tensor source, never
// through a CPU model), and under a GPU budget a GPU tier of routed experts over the model's RAM tier, sized by
// what the budget leaves once a probe session has run; sequences are cuda::GpuSessions with tokens chosen on the
// device. The budget counts device memory as the driver reports it (nvidia-smi's count, the CUDA context included).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "diskformer/backend/cuda/device_sampler.h"
#include "diskformer/backend/cuda/plan.h"
#include "diskformer/backend/cuda/session.h"
#include "diskformer/cache/cuda/device_rows.h"
#include "diskformer/cache/cuda/device_tier.h"
#include "diskformer/cudart/check.h"
#include "diskformer/cudart/devices.h"
#include "diskformer/cudart/pinned.h"
#include "diskformer/engine/row_warmup.h"
#include "diskformer/util/check.h"
#include "diskformer/util/size.h"
#include "engine/sequence.h"

namespace df::engine {

namespace {

// What sessions may allocate beyond the measured probe (CUDA graphs of later sessions); the probe has loaded the
// kernels, cuBLAS and the streaming buffers already.
constexpr uint64_t kSessionReserve = 16ull << 20;

// Without a budget everything is resident, the KV cache of n_ctx positions included. A plan larger than the device
// takes cuda::automatic_budget where the model has something to stream (experts, a per-layer table); otherwise it is
// refused with its items (a default CUDA run then falls back to the CPU) before any allocation fails.
Result<cuda::GpuPlan> plan(const ModelFiles& f, uint32_t n_ctx, uint32_t sessions, const GpuOptions& o) {
  DF_CUDA_CHECK(cudaFree(nullptr));  // creates the context, so that it is counted
  auto make = [&](std::optional<uint64_t> budget) {
    return cuda::plan_gpu(f.spec, f.tensors, f.layouts,
                          {.budget = budget, .n_ctx = n_ctx, .max_batch = o.max_batch, .sessions = sessions,
                           .context_bytes = cuda::device_memory_used(), .row_slots = o.row_slots});
  };
  DF_ASSIGN(cuda::GpuPlan p, make(o.budget));
  const uint64_t device = cuda::query_devices().total_bytes;
  if (o.budget || !device || p.total_bytes() <= device) return p;
  const bool can_stream = f.spec.moe() || f.tensors.ple_table != nullptr;
  if (const auto budget = cuda::automatic_budget(p, device, can_stream)) return make(budget);
  return Error{"the GPU's " + format_size(device) + " cannot hold this model at -c " + std::to_string(n_ctx) + ": " +
               p.describe() + "; a smaller -c needs a smaller KV cache"};
}

class CudaBackend;

class CudaSequence final : public Sequence {
 public:
  CudaSequence(CudaBackend& b, std::unique_ptr<cuda::GpuSession> s) : b_(b), s_(std::move(s)) { sample_memory(); }
  Status eval(std::span<const int32_t> tokens, bool all_logits) override {
    DF_TRY(s_->eval(tokens, all_logits));
    if (tokens.size() > 1) sample_memory();
    return {};
  }
  std::span<const float> logits() override { return s_->logits(); }
  int32_t next_token(sampling::Sampler& sampler, std::span<const int32_t> history) override;
  uint32_t n_past() const override { return s_->n_past(); }
  uint32_t n_ctx() const override { return s_->n_ctx(); }
  uint32_t n_vocab() const override;
  void truncate(uint32_t n_keep) override { s_->truncate(n_keep); }
  SessionStats stats() override;
  cuda::GpuSession& gpu() { return *s_; }
  const CudaBackend* owner() const { return &b_; }

 private:
  // What nvidia-smi counts for the device: every process's allocations and contexts.
  void sample_memory() { used_peak_ = std::max(used_peak_, cuda::device_memory_used()); }
  CudaBackend& b_;
  std::unique_ptr<cuda::GpuSession> s_;
  cuda::DeviceSampler sampler_;
  uint64_t used_peak_ = 0;
};

class CudaBackend final : public BackendModel {
 public:
  explicit CudaBackend(Model& m) : m_(m) {}
  ~CudaBackend() override {
    tier_.reset();
    rows_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status load(model::TensorSource& source) {
    const ModelFiles& f = m_.files();
    const GpuOptions& o = m_.options().gpu;
    const auto dev = cuda::query_devices();
    if (dev.count == 0) return Error{"--backend cuda: no CUDA device (" + dev.why_none + ")"};
    device_name_ = dev.name;
    DF_ASSIGN(plan_, plan(f, m_.n_ctx(), m_.options().sessions, o));
    const bool stream = plan_.stream_experts || (o.slots && f.spec.moe());
    DF_ASSIGN(weights_, cuda::GpuWeights::upload(f.spec, f.tensors, source,
                                                 {.experts = !stream, .token_embd_on_host = plan_.token_embd_on_host,
                                                  .ple_table_streamed = plan_.ple_row_slots > 0}));
    DF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    gpu_.spec = f.spec;
    gpu_.weights = weights_.get();
    gpu_.stream = stream_;
    if (plan_.ple_row_slots) DF_TRY(open_rows());
    if (stream) DF_TRY(open_tier());
    return {};
  }

  Result<std::unique_ptr<Sequence>> new_sequence() override {
    DF_ASSIGN(auto s, cuda::GpuSession::create(gpu_, session_options()));
    return std::unique_ptr<Sequence>(new CudaSequence(*this, std::move(s)));
  }

  std::string describe() const override {
    std::string s = "GPU " + device_name_ + ": " + format_size(weights_->device_bytes()) + " of weights";
    if (rows_)
      s += ", per-layer embeddings through " + std::to_string(rows_->slots()) + " GPU rows of " +
           format_size(rows_->row_bytes()) + " (" + std::to_string(rows_->warm_slots()) + " warm)";
    if (m_.gpu_budget_automatic())
      s += " (the model is larger than the GPU: budget " + format_size(*m_.options().gpu.budget) +
           ", the GPU's memory less a headroom; --gpu-budget sets another)";
    if (!tier_) return s + (rows_ ? ", every other weight resident" : ", every weight resident");
    const model::ModelSpec& sp = m_.spec();
    const uint64_t n = uint64_t(sp.n_layer) * sp.n_expert;
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * tier_->slots() / double(n));
    s += ", experts streamed through " + std::to_string(tier_->slots()) + " GPU slots of " +
         format_size(tier_->slot_bytes()) + " (" + pct + " of " + std::to_string(n) + " experts), resident part " +
         format_size(used_resident_) + " in use";
    if (plan_.token_embd_on_host) s += ", token embeddings in pinned host RAM";
    return s;
  }
  uint64_t bytes_read_at_open() const override { return weights_->bytes_read() + rows_warm_bytes_; }
  void add_stats(ModelStats& s) override {
    if (rows_) {
      s.gpu_rows = rows_->stats();
      s.gpu_row_slots = rows_->slots();
    }
    if (!tier_) return;
    s.gpu = tier_->stats();
    s.gpu_slots = tier_->slots();
  }
  void reset_stats() override {
    if (tier_) tier_->reset_stats();
    if (rows_) rows_->reset_stats();
  }

  // One forward pass for the step where the family's forward takes several sequences (cuda::GpuSession::decode_many:
  // each weight and streamed expert read once for all of them), in batches of max_batch; else one after another.
  Status decode_batch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens) override {
    if (seqs.size() < 2 || !cuda::GpuSession::batch_supported(m_.spec()))
      return BackendModel::decode_batch(seqs, tokens);
    std::vector<cuda::GpuSession*> ss;
    for (Sequence* s : seqs) {
      auto* c = dynamic_cast<CudaSequence*>(s);
      DF_CHECK(c != nullptr && c->owner() == this);
      ss.push_back(&c->gpu());
    }
    const size_t batch = std::min(m_.options().gpu.max_batch, m_.n_ctx());
    for (size_t i = 0; i < ss.size(); i += batch) {
      const size_t k = std::min(batch, ss.size() - i);
      DF_TRY(cuda::GpuSession::decode_many(std::span(ss).subspan(i, k), tokens.subspan(i, k)));
    }
    return {};
  }

  uint64_t device_bytes() const {
    uint64_t work = 0;
    for (const cuda::DeviceBuffer& b : work_->buf) work += b.size();
    return weights_->device_bytes() + (tier_ ? tier_->device_bytes() : 0) + (rows_ ? rows_->device_bytes() : 0) +
           work;
  }
  const std::string& device_name() const { return device_name_; }
  uint32_t n_vocab() const { return m_.spec().n_vocab; }

 private:
  Status make_tier(uint32_t slots) {
    const model::ModelSpec& sp = m_.spec();
    tier_.reset();  // a new size replaces the old tier (its memory first)
    // The spill part passes the records not admitted: two tokens' experts of a layer (a decode step's group), up to
    // an eighth of the slots, never more than half.
    const uint32_t spill = std::min(slots / 2, std::max(2 * sp.n_expert_used, slots / 8));
    DF_ASSIGN(tier_, cache::DeviceTier::create(*m_.ram_tier(), {.n_layers = sp.n_layer, .n_index = sp.n_expert,
                                                                 .slots = slots, .parts = cuda::expert_planes(m_.files().layouts),
                                                                 .consumer = stream_, .spill = spill}));
    const GpuOptions& o = m_.options().gpu;
    const bool cpu = o.cpu_experts.value_or(cuda::cpu_experts_round_alike(m_.files().layouts));
    gpu_.streamed = cuda::StreamedExperts{.gpu = tier_.get(), .ram = m_.ram_tier(), .layouts = &m_.files().layouts,
                                          .cpu = cpu ? &m_.context() : nullptr, .prefetch = o.prefetch};
    return {};
  }

  // Every session's shape; they share one set of work buffers.
  cuda::GpuSessionOptions session_options() const {
    const GpuOptions& o = m_.options().gpu;
    return {.n_ctx = m_.n_ctx(), .max_batch = o.max_batch, .decode_graph = o.decode_graph,
            .grouped_experts = o.grouped_experts, .work = work_};
  }

  // The per-layer embedding table's GPU row cache over the model's RAM row cache, half of it (leaving a batch's rows)
  // warmed with the ids real text uses most.
  Status open_rows() {
    cache::RowCache* host = m_.row_tier();
    if (!host) {  // the plan before the RAM caches kept the table resident: a budget at the edge, measured twice
      const std::optional<uint64_t>& b = m_.options().gpu.budget;
      return Error{"--gpu-budget " + (b ? format_size(*b) : std::string("(none)")) +
                   " lies at the edge of holding the per-layer embedding table; a little more or less decides it"};
    }
    const uint32_t slots = plan_.ple_row_slots, batch = std::min(m_.options().gpu.max_batch, m_.n_ctx());
    const uint64_t rows = host->options().rows;
    const uint32_t warm = slots > batch ? std::min(slots / 2, slots - batch) : 0;
    DF_ASSIGN(rows_, cache::DeviceRowCache::create(
                         *host, {.slots = slots,
                                 .max_batch = batch,
                                 .warm = warm_row_ranges(m_.files().file, rows, std::min<uint64_t>(warm, rows)),
                                 .consumer = stream_}));
    // The warm rows' reads are the open's; the RAM cache then counts only what the GPU misses.
    rows_warm_bytes_ = host->row_stats().bytes_loaded;
    host->reset_stats();
    rows_->reset_stats();
    gpu_.ple_rows = rows_.get();
    return {};
  }

  // The GPU tier at its fewest slots, a probe session that runs what a run runs (kernel modules load on first launch
  // and cuBLAS allocates its workspace on first use), the device memory then in use, and the slots the budget leaves.
  Status open_tier() {
    const model::ModelSpec& sp = m_.spec();
    const GpuOptions& o = m_.options().gpu;
    DF_CHECK(m_.ram_tier() != nullptr);
    if (o.slots) {
      if (*o.slots < plan_.min_slots)
        return Error{"GPU expert slots " + std::to_string(*o.slots) + ": at least " + std::to_string(plan_.min_slots) +
                     " (two tokens' experts of a layer)"};
      return make_tier(std::min<uint32_t>(*o.slots, plan_.n_records));
    }
    DF_TRY(make_tier(plan_.min_slots));
    {
      DF_ASSIGN(auto probe, cuda::GpuSession::create(gpu_, session_options()));
      const std::vector<int32_t> warm(std::max<uint32_t>(1, std::min({64u, o.max_batch, m_.n_ctx() - 1})), 1);
      DF_TRY(probe->eval(warm));
      if (m_.n_ctx() > warm.size()) DF_TRY(probe->eval(std::span<const int32_t>(warm.data(), 1)));
      used_resident_ = cuda::device_memory_used() - tier_->device_bytes();
      // The other sessions (the server's --parallel) each add their own buffers, a device sampler's row of logits
      // and a captured step; the work buffers are shared.
      const uint64_t per_session = probe->device_bytes() + uint64_t(sp.n_vocab) * 4 + (1ull << 20);
      used_resident_ += uint64_t(std::max<uint32_t>(m_.options().sessions, 1) - 1) * per_session;
    }
    tier_->reset_stats();
    const uint64_t slot = tier_->slot_bytes(), budget = *o.budget;
    const uint64_t need = used_resident_ + kSessionReserve + uint64_t(plan_.min_slots) * slot;
    if (budget < need)
      return Error{"--gpu-budget " + format_size(budget) + " is too small: the resident part (weights " +
                   format_size(weights_->device_bytes()) + ", each session's KV cache and buffers, the CUDA context) " +
                   "takes " + format_size(used_resident_) + " of device memory, " + format_size(kSessionReserve) +
                   " is kept for buffers sessions allocate later, and streaming needs at least " +
                   std::to_string(plan_.min_slots) + " expert slots of " + format_size(slot) + ": at least " +
                   format_size(need)};
    const uint64_t n_records = uint64_t(sp.n_layer) * sp.n_expert;
    return make_tier(uint32_t(std::min<uint64_t>((budget - used_resident_ - kSessionReserve) / slot, n_records)));
  }

  Model& m_;
  cuda::GpuPlan plan_;
  std::unique_ptr<cuda::GpuWeights> weights_;
  std::unique_ptr<cache::DeviceTier> tier_;
  std::unique_ptr<cache::DeviceRowCache> rows_;
  std::shared_ptr<cuda::SessionWork> work_ = std::make_shared<cuda::SessionWork>();
  cudaStream_t stream_ = nullptr;
  cuda::GpuModel gpu_;
  std::string device_name_;
  uint64_t used_resident_ = 0;
  uint64_t rows_warm_bytes_ = 0;  // read from disk into the RAM row cache for the GPU's warm rows
};

int32_t CudaSequence::next_token(sampling::Sampler& sampler, std::span<const int32_t> history) {
  return sampler_.sample(sampler, s_->last_logits_device(), int64_t(b_.n_vocab()), s_->stream(), history);
}

uint32_t CudaSequence::n_vocab() const { return b_.n_vocab(); }

SessionStats CudaSequence::stats() {
  sample_memory();
  const cuda::ExpertHostTimes t = s_->expert_host_times();
  return {.backend = "cuda",
          .device = b_.device_name(),
          .device_bytes = b_.device_bytes() + s_->device_bytes() + sampler_.device_bytes(),
          .own_device_bytes = s_->device_bytes() + sampler_.device_bytes(),
          .device_used_peak = used_peak_,
          .cpu_experts = s_->cpu_experts_computed(),
          .expert_host_s = t.total_s,
          .expert_gpu_wait_s = t.gpu_wait_s,
          .expert_cpu_s = t.cpu_s};
}

}  // namespace

Result<CudaStreams> cuda_streams(const ModelFiles& files, uint32_t n_ctx, uint32_t sessions,
                                 const GpuOptions& options) {
  const bool moe = files.spec.moe(), table = files.tensors.ple_table != nullptr;
  if (!moe && !table) return CudaStreams{};
  if (options.slots && !table) return CudaStreams{.experts = true};
  const auto dev = cuda::query_devices();
  if (dev.count == 0) return Error{"--backend cuda: no CUDA device (" + dev.why_none + ")"};
  DF_ASSIGN(const cuda::GpuPlan p, plan(files, n_ctx, sessions, options));
  return CudaStreams{.experts = moe && (p.stream_experts || options.slots), .rows = p.ple_row_slots > 0,
                     .automatic_budget = options.budget ? std::nullopt : p.budget};
}

io::HostAllocator* cuda_host_allocator() { return &cuda::pinned_host_allocator(); }

Result<std::unique_ptr<BackendModel>> open_cuda_backend(Model& model, model::TensorSource& source) {
  auto b = std::make_unique<CudaBackend>(model);
  DF_TRY(b->load(source));
  return std::unique_ptr<BackendModel>(std::move(b));
}

}  // namespace df::engine
