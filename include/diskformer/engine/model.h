// A model opened for a run on one backend: what -m names (a GGUF or a store), the RAM plan and its tiers, and the
// backend's weights -- on the CPU the resident arena and the forward pass's views; on CUDA the weights uploaded from
// the GGUF or store directly (no CPU model is built first), and under --gpu-budget a GPU tier of routed experts
// over the RAM tier. Sessions (session.h) are its sequences; run, chat, bench and the server all drive them.
//
//   DF_ASSIGN(auto model, engine::Model::open("m.gguf", {.threads = 4}));
//   DF_ASSIGN(engine::Session s, engine::Session::create(*model));
//   DF_TRY(s.eval(prompt_ids));            // the last token's logits in s.logits()
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "diskformer/backend/cpu/kernels.h"
#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cpu/thread_pool.h"
#include "diskformer/cache/row_cache.h"
#include "diskformer/cache/tier.h"
#include "diskformer/engine/model_files.h"
#include "diskformer/engine/plan.h"
#include "diskformer/io/buffer.h"

namespace df::engine {

enum class Backend { kCpu, kCuda };
const char* backend_name(Backend b);  // "cpu", "cuda"

// CUDA runs.
struct GpuOptions {
  std::optional<uint64_t> budget;  // device memory in use at most, CUDA context included; nullopt: all resident
  std::optional<uint32_t> slots;   // GPU expert slots instead of what the budget leaves (at least 2 x n_used)
  // A per-layer embedding table's rows through a GPU row cache of this many rows (at least max_batch), whatever the
  // budget; nullopt: as the GPU plan decides.
  std::optional<uint32_t> row_slots;
  uint32_t max_batch = 512;        // tokens per forward pass; under a budget the experts stream once per batch
  bool decode_graph = true;        // replay single-token steps from a captured CUDA graph
  bool grouped_experts = true;     // batches multiply the routed experts grouped by expert
  // Streamed decode computes on the CPU the misses it finishes before their copies. nullopt (auto): where the CPU's
  // products of the experts' types round as the GPU's (cuda::cpu_experts_round_alike), so that the output stays the
  // resident run's; true or false forces it.
  std::optional<bool> cpu_experts;
  // Streamed decode copies the next layer's guessed experts ahead. Off by default: on the H200 at 1.8 GiB the copies
  // of wrong guesses took the link from the CPU share's split (42 against 55 tok/s on the 30B shape) and cost
  // 9.5 GiB decode an eighth.
  bool prefetch = false;
};

struct ModelOptions {
  uint32_t n_ctx = 0;                     // 0: the model's training context, capped at 4096
  int threads = 0;                        // 0: physical cores
  std::optional<uint64_t> ram_budget;     // nullopt: every weight resident in RAM
  const cpu::Kernels* kernels = nullptr;  // nullptr: the best this CPU runs
  uint32_t n_batch = 512;                 // CPU: tokens per forward pass
  // Sessions open at once (the server's --parallel): the RAM and GPU plans count a KV cache (and a hybrid model's
  // recurrent state) and work buffers for each.
  uint32_t sessions = 1;
  Backend backend = Backend::kCpu;
  GpuOptions gpu;
  // Called from open's thread as the weights it reads at open arrive: bytes so far, and what open expects to read
  // (an estimate on CUDA; done may stop short of it or pass it). nullptr: nothing reported.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Where the bytes came from and went, since open (or the last reset_stats()).
struct ModelStats {
  uint64_t resident_bytes_read = 0;  // read at open (the arena, and a resident RAM tier)
  uint64_t streamed_bytes_read = 0;  // read into the RAM tier's slots since open or the last reset
  std::optional<cache::TierStats> ram;  // the RAM tier, where one streams
  std::optional<cache::TierStats> gpu;  // the GPU tier, where one streams
  uint32_t gpu_slots = 0;
  // The row caches of the per-token tables, where their rows stream (the per-layer embedding table; on the CPU under
  // a budget the token embeddings), together: lookups (warm rows are hits) and the rows read from disk since open
  // (warm-up not included) or the last reset; the rows they hold.
  std::optional<cache::TierStats> rows;
  uint64_t streamed_row_bytes = 0;
  uint32_t row_slots = 0;
  // On CUDA, the table's GPU row cache where its rows stream: lookups and the bytes copied to the GPU.
  std::optional<cache::TierStats> gpu_rows;
  uint32_t gpu_row_slots = 0;
  uint64_t bytes_from_disk() const { return resident_bytes_read + streamed_bytes_read + streamed_row_bytes; }
};

class BackendModel;  // the backend's side of a model (engine/backend_model.h)

class Model {
 public:
  // Errors name the file and what is wrong (model_files.h), a budget too small (with the numbers), a backend that
  // cannot run the model (no GPU, a weight type without CUDA kernels, GPU memory), a failed read.
  static Result<std::unique_ptr<Model>> open(const std::string& path, const ModelOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelFiles& files() const { return *files_; }
  const gguf::File& file() const { return files_->file; }
  const model::ModelSpec& spec() const { return files_->spec; }
  // As opened: on CUDA without a GPU budget, a model larger than the GPU that streams its experts (or per-layer
  // table) takes the budget cuda::automatic_budget gives, and options().gpu.budget holds it.
  const ModelOptions& options() const { return options_; }
  bool gpu_budget_automatic() const { return gpu_budget_automatic_; }
  Backend backend() const { return options_.backend; }
  uint32_t n_ctx() const { return n_ctx_; }
  int threads() const { return pool_->size(); }
  cpu::Context& context() { return ctx_; }
  const WeightPlan& plan() const { return plan_; }
  // The RAM tier of streamed records (experts, or dense layers); nullptr where nothing streams through RAM.
  cache::RecordTier* ram_tier() { return ram_tier_.get(); }
  // The row cache of the per-layer embedding table (record (0, token id)); nullptr where the table is resident.
  cache::RowCache* row_tier() { return row_tier_.get(); }
  // The row cache of the token embeddings (CPU runs under a budget); nullptr where they are resident.
  cache::RowCache* token_rows() { return token_rows_.get(); }
  // One line each: where the weights are (RAM plan; on CUDA also the GPU's residency).
  std::string describe() const;
  ModelStats stats();
  void reset_stats();
  BackendModel& backend_model() { return *backend_; }

 private:
  Model() = default;
  Status open_ram_tier(io::HostAllocator* allocator, std::function<void(uint64_t)> on_load);
  // A per-token table's row cache: `slots` rows, `warm` of them loaded now (their bytes into row_initial_bytes_).
  Result<std::unique_ptr<cache::RowCache>> open_rows(const gguf::TensorInfo& table, uint32_t slots, uint32_t warm);

  ModelOptions options_;
  bool gpu_budget_automatic_ = false;
  std::unique_ptr<ModelFiles> files_;
  uint32_t n_ctx_ = 0;
  WeightPlan plan_;
  std::unique_ptr<cpu::ThreadPool> pool_;
  cpu::Context ctx_;
  std::unique_ptr<cache::RecordTier> ram_tier_;
  uint64_t ram_tier_initial_bytes_ = 0;
  std::unique_ptr<cache::RowCache> row_tier_, token_rows_;
  uint64_t row_initial_bytes_ = 0;  // the row caches' warm-up reads
  std::unique_ptr<BackendModel> backend_;
};

}  // namespace df::engine
