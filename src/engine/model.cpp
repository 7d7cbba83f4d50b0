#include "diskformer/engine/model.h"

#include <algorithm>

#include "diskformer/backend/cuda/plan.h"
#include "diskformer/cache/host_tier.h"
#include "diskformer/cache/row_cache.h"
#include "diskformer/engine/row_warmup.h"
#include "diskformer/engine/tensor_reader.h"
#include "engine/sequence.h"

namespace df::engine {

const char* backend_name(Backend b) { return b == Backend::kCuda ? "cuda" : "cpu"; }

Model::~Model() = default;

namespace {

uint64_t expert_tensor_bytes(const model::ModelTensors& t) {
  uint64_t n = 0;
  for (const auto& l : t.layers)
    for (const gguf::TensorInfo* x : {l.gate_exps, l.up_exps, l.down_exps})
      if (x) n += x->n_bytes;
  return n;
}

// What open reads, as ModelOptions::progress reports it: the CPU's arena, or the tensors CUDA uploads, and a
// resident RAM tier's records.
struct LoadCounter {
  const std::function<void(uint64_t, uint64_t)>& report;
  uint64_t total = 0, done = 0;
  void add(uint64_t n) {
    done += n;
    if (report) report(done, total);
  }
};

}  // namespace

Result<std::unique_ptr<Model>> Model::open(const std::string& path, const ModelOptions& o) {
  std::unique_ptr<Model> m(new Model());
  m->options_ = o;
  m->options_.progress = nullptr;  // the caller's, for open only
  DF_ASSIGN(m->files_, open_model_files(path));
  const model::ModelSpec& spec = m->files_->spec;
  m->n_ctx_ = o.n_ctx ? o.n_ctx : std::min<uint32_t>(spec.n_ctx_train ? spec.n_ctx_train : 4096, 4096);
  // On CUDA the KV cache and work buffers are on the GPU (its plan counts them), and RAM holds what the GPU tier
  // streams from: the RAM plan then leaves them out and is not held against the machine's RAM.
  const bool cpu = o.backend == Backend::kCpu;
  DF_ASSIGN(m->plan_, plan_weights(*m->files_, {.n_ctx = m->n_ctx_,
                                                .n_batch = o.n_batch,
                                                .sessions = o.sessions,
                                                .budget = o.ram_budget,
                                                .kv_in_ram = cpu,
                                                .token_rows = cpu,
                                                .machine_ram = cpu ? machine_ram_bytes() : std::nullopt}));
  m->pool_ = std::make_unique<cpu::ThreadPool>(o.threads > 0 ? o.threads : cpu::default_thread_count());
  m->ctx_.pool = m->pool_.get();
  if (o.kernels) m->ctx_.kernels = o.kernels;

  // The RAM tier: on the CPU every streamed record; on CUDA the experts the GPU streams (none where it holds them
  // all), in pinned memory.
  bool ram_tier = m->plan_.slots > 0;
  CudaStreams gpu;
  io::HostAllocator* allocator = nullptr;
  if (o.backend == Backend::kCuda) {
    DF_ASSIGN(gpu, cuda_streams(*m->files_, m->n_ctx_, o.sessions, o.gpu));
    if (gpu.automatic_budget) {
      m->options_.gpu.budget = gpu.automatic_budget;
      m->gpu_budget_automatic_ = true;
    }
    ram_tier = ram_tier && gpu.experts;
    allocator = cuda_host_allocator();
  }
  const bool gpu_streams = gpu.experts;
  const ModelFiles& f = *m->files_;
  LoadCounter load{o.progress};
  const uint64_t experts = expert_tensor_bytes(f.tensors);
  if (cpu) {
    for (const gguf::TensorInfo* t : arena_tensors(f.tensors, m->plan_)) load.total += t->n_bytes;
  } else {
    load.total = f.tensor_bytes - (gpu_streams ? experts : 0) - (gpu.rows ? f.tensors.ple_table->n_bytes : 0);
  }
  if (ram_tier && m->plan_.records_resident()) load.total += experts;

  if (ram_tier) DF_TRY(m->open_ram_tier(allocator, [&load](uint64_t n) { load.add(n); }));
  // The per-layer embedding rows, where they stream (on CUDA: where the GPU's row cache reads them from RAM): a row
  // cache of the RAM plan's rows, half of it warmed, or where that plan holds the whole table, a cache of every row
  // filled on demand (the GPU's warm rows come through it).
  const RowTablePlan& ple = m->plan_.ple;
  if (cpu ? ple.streams() : gpu.rows) {
    const uint32_t all = uint32_t(f.tensors.ple_table->rows());
    DF_ASSIGN(m->row_tier_, m->open_rows(*f.tensors.ple_table, ple.streams() ? ple.slots : all,
                                         ple.streams() ? ple.slots / 2 : 0));
  }
  // The token embeddings' rows on the CPU (a GPU run uploads them from the file as its plan says).
  if (cpu && m->plan_.tokens.streams()) {
    DF_ASSIGN(m->token_rows_,
              m->open_rows(*f.tensors.token_embd, m->plan_.tokens.slots, m->plan_.tokens.slots / 2));
  }
  DF_ASSIGN(std::unique_ptr<TensorReader> reader, TensorReader::open(f.records));
  if (o.progress) reader->set_progress([&load](uint64_t n) { load.add(n); });
  if (o.backend == Backend::kCuda) {
    DF_ASSIGN(m->backend_, open_cuda_backend(*m, *reader));
  } else {
    DF_ASSIGN(m->backend_, open_cpu_backend(*m, *reader));
  }
  return m;
}

Status Model::open_ram_tier(io::HostAllocator* allocator, std::function<void(uint64_t)> on_load) {
  const ModelFiles& f = *files_;
  const bool experts = f.spec.moe();
  DF_ASSIGN(auto reader, io::Reader::create({}));
  // One file id per file of the map: a split GGUF's records lie in several parts.
  std::vector<io::FileId> fids;
  for (const std::string& path : f.records.files()) {
    DF_ASSIGN(const io::FileId fid, reader->open(path));
    fids.push_back(fid);
  }
  const store::RecordKind kind = experts ? store::RecordKind::kExpert : store::RecordKind::kLayer;
  const uint32_t n_index = experts ? f.spec.n_expert : 1;
  std::vector<store::RecordPart> parts;
  cache::Locator locate = [&f, fids, kind, n_index, parts](cache::Key key,
                                                            std::vector<cache::Extent>& out) mutable -> Status {
    DF_TRY(f.records.parts({kind, uint32_t(key / n_index), uint32_t(key % n_index)}, parts));
    for (const store::RecordPart& p : parts)
      out.push_back({.file = fids[p.file], .offset = p.file_offset, .length = p.length, .slot_offset = p.slot_offset});
    return Status{};
  };
  // Reads ahead: the next layer for dense layers; for experts the next layer's guessed top-k for a token or two
  // (the browser original's look-ahead of one layer), a quarter of the slots at most so that they never hold the
  // slots a layer's own experts need.
  const uint32_t max_prefetch =
      experts ? std::max<uint32_t>(1, std::min(2 * f.spec.n_expert_used, plan_.slots / 4)) : 1;
  DF_ASSIGN(std::unique_ptr<cache::HostTier> tier,
            cache::HostTier::create(std::move(reader), std::move(locate),
                                    {.n_layers = f.spec.n_layer, .n_index = n_index, .slots = plan_.slots,
                                     .slot_bytes = plan_.record_bytes, .resident = plan_.records_resident(),
                                     .max_prefetch = max_prefetch, .allocator = allocator,
                                     .on_load = std::move(on_load)}));
  ram_tier_initial_bytes_ = tier->bytes_read_at_creation();
  ram_tier_ = std::move(tier);
  return {};
}

Result<std::unique_ptr<cache::RowCache>> Model::open_rows(const gguf::TensorInfo& t, uint32_t slots,
                                                         uint32_t warm_rows) {
  const ModelFiles& f = *files_;
  const auto& tables = f.records.tables();
  const auto it = std::find_if(tables.begin(), tables.end(), [&](const auto& x) { return x.tensor == t.name; });
  if (it == tables.end()) return Error{f.records.path() + ": no table " + t.name + " in the record map"};
  DF_ASSIGN(auto reader, io::Reader::create({}));
  DF_ASSIGN(const io::FileId fid, reader->open(f.records.files()[it->file]));  // the part holding the table
  DF_ASSIGN(std::unique_ptr<cache::RowCache> rows,
            cache::RowCache::create(std::move(reader), {.file = fid, .table_offset = it->base,
                                                        .row_bytes = it->row_bytes, .rows = it->rows,
                                                        .slots = slots}));
  const std::vector<cache::RowRange> warm = warm_row_ranges(f.file, uint32_t(it->rows), warm_rows);
  DF_TRY(rows->warm(warm));
  row_initial_bytes_ += rows->row_stats().bytes_loaded;
  rows->reset_stats();
  return rows;
}

std::string Model::describe() const {
  std::string s = "RAM " + plan_.describe();
  const std::string b = backend_->describe();
  return b.empty() ? s : s + "; " + b;
}

ModelStats Model::stats() {
  ModelStats s;
  s.resident_bytes_read = backend_->bytes_read_at_open() + ram_tier_initial_bytes_ + row_initial_bytes_;
  if (ram_tier_ && !ram_tier_->resident()) {
    s.ram = ram_tier_->stats();
    s.streamed_bytes_read = s.ram->cache.bytes_loaded;
  }
  // The row caches together: lookups, hits and rows read of the per-layer table and of the token embeddings.
  for (cache::RowCache* r : {row_tier_.get(), token_rows_.get()}) {
    if (!r) continue;
    if (!s.rows) s.rows = cache::TierStats{};
    s.rows->cache += r->stats().cache;
    s.row_slots += r->slots();
  }
  if (s.rows) s.streamed_row_bytes = s.rows->cache.bytes_loaded;
  backend_->add_stats(s);
  return s;
}

void Model::reset_stats() {
  if (ram_tier_) ram_tier_->reset_stats();
  if (row_tier_) row_tier_->reset_stats();
  if (token_rows_) token_rows_->reset_stats();
  backend_->reset_stats();
}

}  // namespace df::engine
