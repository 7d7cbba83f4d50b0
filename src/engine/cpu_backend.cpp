// The CPU backend of engine::Model: the resident arena (read once through the disk tier), the forward pass's views
// into it and into the model's RAM tier, and sequences that each hold a KV cache (hybrid models' sequences also
// their recurrent state: engine/hybrid_sequence.h).
#include <algorithm>
#include <memory>
#include <new>
#include <vector>

#include "diskformer/backend/cpu/forward.h"
#include "diskformer/io/buffer.h"
#include "diskformer/util/check.h"
#include "engine/hybrid_sequence.h"
#include "diskformer/util/size.h"
#include "engine/sequence.h"

namespace df::engine {

namespace {

class CpuBackend final : public BackendModel {
 public:
  explicit CpuBackend(Model& m) : m_(m) {}

  Status load(model::TensorSource& source) {
    const ModelFiles& f = m_.files();
    const bool stream_layers = m_.plan().mode == Residency::kStreamLayers;
    const bool stream_rows = m_.plan().ple.streams(), stream_tokens = m_.plan().tokens.streams();
    const std::vector<const gguf::TensorInfo*> list = arena_tensors(f.tensors, m_.plan());
    const ArenaLayout a = arena_layout(f.records, list);
    DF_ASSIGN(arena_, io::AlignedBuffer::allocate(std::max<uint64_t>(a.bytes, io::kDirectAlignment)));
    std::vector<model::TensorSource::Piece> pieces;
    for (const auto& [t, off] : a.at) pieces.push_back({t, 0, t->n_bytes, arena_.data() + off});
    DF_TRY(source.read(pieces));
    for (const auto& [t, off] : a.at) bytes_read_ += t->n_bytes;
    auto view = [&](const gguf::TensorInfo* t) {
      if (!t) return model::Mat{};
      auto it = std::find_if(a.at.begin(), a.at.end(), [&](const auto& p) { return p.first == t; });
      DF_CHECK(it != a.at.end());
      return model::mat_of(*t, arena_.data() + it->second);
    };
    // Streamed token rows keep the table's shape (no data), as the per-layer table's below.
    w_.token_embd = stream_tokens ? model::mat_of(*f.tensors.token_embd, nullptr) : view(f.tensors.token_embd);
    w_.token_rows = stream_tokens ? m_.token_rows() : nullptr;
    DF_CHECK(!stream_tokens || w_.token_rows != nullptr);
    w_.output_norm = view(f.tensors.output_norm);
    w_.output = view(f.tensors.output);
    w_.rope_freqs = view(f.tensors.rope_freqs);
    w_.ple_model_proj = view(f.tensors.ple_model_proj);
    w_.ple_proj_norm = view(f.tensors.ple_proj_norm);
    if (f.tensors.ple_table) {
      // Streamed rows keep the table's shape (no data): each row is viewed where its pin holds it.
      w_.ple_table = stream_rows ? model::mat_of(*f.tensors.ple_table, nullptr) : view(f.tensors.ple_table);
      w_.ple_rows = stream_rows ? m_.row_tier() : nullptr;
      DF_CHECK(!stream_rows || w_.ple_rows != nullptr);
    }
    if (!stream_layers)
      for (const auto& l : f.tensors.layers) {
        model::LayerWeights lw;
        for (const model::LayerField& fl : model::layer_fields()) lw.*fl.mat = view(l.*fl.tensor);
        w_.layers.push_back(lw);
      }
    w_.layouts = &f.layouts;
    if (f.spec.moe()) {
      w_.expert_tier = m_.ram_tier();
      DF_CHECK(w_.expert_tier != nullptr);
    } else if (stream_layers) {
      w_.layer_tier = m_.ram_tier();
      DF_CHECK(w_.layer_tier != nullptr);
    }
    return {};
  }

  Result<std::unique_ptr<Sequence>> new_sequence() override;
  Status decode_batch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens) override;
  std::string describe() const override { return ""; }
  uint64_t bytes_read_at_open() const override { return bytes_read_; }

  Model& m_;
  io::AlignedBuffer arena_;
  cpu::ForwardWeights w_;
  uint64_t bytes_read_ = 0;
  std::unique_ptr<cpu::Forward> many_;  // the multi-sequence decode step's activations, made on first use
};

class CpuSequence final : public Sequence {
 public:
  explicit CpuSequence(CpuBackend& b)
      : b_(b), kv_(b.m_.spec(), b.m_.n_ctx()), forward_(cpu::make_forward(b.m_.spec(), b.w_, b.m_.context())) {}

  Status eval(std::span<const int32_t> tokens, bool all_logits) override {
    const uint32_t n_batch = std::max<uint32_t>(1, b_.m_.options().n_batch);
    const size_t n = tokens.size();
    all_logits_.clear();
    for (size_t i = 0; i < n; i += n_batch) {
      const size_t m = std::min<size_t>(n_batch, n - i);
      DF_TRY(forward_->run(tokens.subspan(i, m), kv_, all_logits));
      if (all_logits) all_logits_.insert(all_logits_.end(), forward_->logits().begin(), forward_->logits().end());
    }
    rows_all_ = all_logits;
    return {};
  }
  std::span<const float> logits() override {
    if (rows_all_) return all_logits_;
    const auto& l = forward_->logits();
    return std::span<const float>(l.data(), std::min<size_t>(l.size(), b_.m_.spec().n_vocab));
  }
  int32_t next_token(sampling::Sampler& sampler, std::span<const int32_t> history) override {
    return sampler.sample(logits().last(b_.m_.spec().n_vocab), history);
  }
  uint32_t n_past() const override { return kv_.n_past; }
  uint32_t n_ctx() const override { return kv_.n_ctx; }
  uint32_t n_vocab() const override { return b_.m_.spec().n_vocab; }
  void truncate(uint32_t n_keep) override { kv_.n_past = std::min(kv_.n_past, n_keep); }
  SessionStats stats() override { return {.backend = "cpu"}; }
  void set_routing_stats(model::RoutingStats* r) override { forward_->set_routing_stats(r); }

  // After a step of several sequences: this sequence's row of it.
  void set_logits(std::span<const float> row) {
    all_logits_.assign(row.begin(), row.end());
    rows_all_ = true;
  }
  cpu::KvCache& kv() { return kv_; }
  const CpuBackend* owner() const { return &b_; }

 private:
  CpuBackend& b_;
  cpu::KvCache kv_;
  std::unique_ptr<cpu::ForwardPass> forward_;
  std::vector<float> all_logits_;
  bool rows_all_ = false;
};

Result<std::unique_ptr<Sequence>> CpuBackend::new_sequence() {
  // The plan has held the KV cache against the budget or the machine's RAM; a limit it cannot see (a cgroup's) can
  // still refuse the allocation, which is then an error like any other.
  try {
    if (m_.spec().family == model::Family::kQwen35Moe) return new_hybrid_cpu_sequence(m_, w_);
    return std::unique_ptr<Sequence>(new CpuSequence(*this));
  } catch (const std::bad_alloc&) {
    return Error{"cannot allocate the KV cache of " + format_size(m_.plan().kv_bytes) + " for a context of " +
                 std::to_string(m_.n_ctx()) + " positions (-c)"};
  }
}

Status CpuBackend::decode_batch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens) {
  // The multi-sequence pass is cpu::Forward's (llama, qwen3, qwen3moe); the other families step one by one.
  const model::Family family = m_.spec().family;
  if (family == model::Family::kGemma4 || family == model::Family::kQwen35Moe)
    return BackendModel::decode_batch(seqs, tokens);
  std::vector<CpuSequence*> cs;
  std::vector<cpu::KvCache*> kvs;
  for (Sequence* s : seqs) {
    auto* c = dynamic_cast<CpuSequence*>(s);
    DF_CHECK(c != nullptr && c->owner() == this);
    cs.push_back(c);
    kvs.push_back(&c->kv());
  }
  if (!many_) many_ = std::make_unique<cpu::Forward>(m_.spec(), w_, m_.context());
  DF_TRY(many_->run_many(tokens, kvs));
  const size_t V = m_.spec().n_vocab;
  for (size_t i = 0; i < cs.size(); ++i) cs[i]->set_logits(std::span<const float>(many_->logits()).subspan(i * V, V));
  return {};
}

}  // namespace

Result<std::unique_ptr<BackendModel>> open_cpu_backend(Model& model, model::TensorSource& source) {
  auto b = std::make_unique<CpuBackend>(model);
  DF_TRY(b->load(source));
  return std::unique_ptr<BackendModel>(std::move(b));
}

}  // namespace df::engine
