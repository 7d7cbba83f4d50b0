#include "engine/hybrid_sequence.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "diskformer/backend/cpu/forward_qwen35.h"
#include "diskformer/backend/cpu/recurrent_state.h"

namespace df::engine {

uint64_t hybrid_state_bytes(const model::ModelSpec& spec) {
  return uint64_t(2 + model::kStateSnapshots) * cpu::RecurrentState::bytes_for(spec);  // live, copies, one spare
}

namespace {

class HybridCpuSequence final : public Sequence {
 public:
  HybridCpuSequence(Model& m, const cpu::ForwardWeights& w)
      : m_(m), kv_(m.spec(), m.n_ctx()), state_(m.spec()), forward_(m.spec(), w, m.context()) {}

  Status eval(std::span<const int32_t> tokens, bool all_logits) override {
    if (tokens.empty()) return Error{"forward: empty batch"};
    const uint32_t before = uint32_t(tokens_.size());
    if (before + tokens.size() > kv_.n_ctx)
      return Error{"context overflow: " + std::to_string(before) + " positions used + " +
                   std::to_string(tokens.size()) + " new tokens exceed the context size " +
                   std::to_string(kv_.n_ctx) + " (-c)"};
    // Checked before anything changes: a failure later is a read's, after which the state is rolled back.
    for (size_t t = 0; t < tokens.size(); ++t)
      if (tokens[t] < 0 || uint32_t(tokens[t]) >= m_.spec().n_vocab)
        return Error{"token id " + std::to_string(tokens[t]) + " at batch position " + std::to_string(t) +
                     " is outside the vocabulary of " + std::to_string(m_.spec().n_vocab)};
    // Positions that truncate() kept but whose state was given up go first, in the same batches.
    const uint32_t start = kv_.n_past;
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    const std::span<const int32_t> batch(tokens_.data() + start, tokens_.size() - start);
    const uint32_t end = uint32_t(tokens_.size());
    const bool prompt = tokens.size() >= 2;
    const uint32_t lead = model::snapshot_lead(start, end, tokens.size());

    const uint32_t n_batch = std::max<uint32_t>(1, m_.options().n_batch);
    const uint32_t skip = before - start;  // rows of recomputed positions, not the caller's
    all_logits_.clear();
    std::optional<cpu::RecurrentState> at_lead;
    for (size_t i = 0; i < batch.size(); i += n_batch) {
      const size_t m = std::min<size_t>(n_batch, batch.size() - i);
      const uint32_t c0 = start + uint32_t(i), c1 = c0 + uint32_t(m);
      cpu::HybridForward::Options o{.all_logits = all_logits};
      if (lead > c0 && lead < c1) {
        at_lead = take();
        o.save = &*at_lead;
        o.save_after = lead - c0;
      }
      if (Status st = forward_.run(batch.subspan(i, m), kv_, state_, o); !st.ok()) {
        roll_back(before);
        return st;
      }
      if (lead == c1) {
        at_lead = take();
        *at_lead = state_;
      }
      if (all_logits) all_logits_.insert(all_logits_.end(), forward_.logits().begin(), forward_.logits().end());
    }
    if (all_logits) all_logits_.erase(all_logits_.begin(), all_logits_.begin() + int64_t(skip) * m_.spec().n_vocab);
    rows_all_ = all_logits;
    if (at_lead) keep(std::move(*at_lead));
    if (prompt) {
      cpu::RecurrentState end_copy = take();
      end_copy = state_;
      keep(std::move(end_copy));
    }
    return {};
  }
  std::span<const float> logits() override {
    if (rows_all_) return all_logits_;
    const auto& l = forward_.logits();
    return std::span<const float>(l.data(), std::min<size_t>(l.size(), m_.spec().n_vocab));
  }
  int32_t next_token(sampling::Sampler& sampler, std::span<const int32_t> history) override {
    return sampler.sample(logits().last(m_.spec().n_vocab), history);
  }
  uint32_t n_past() const override { return uint32_t(tokens_.size()); }
  uint32_t n_ctx() const override { return kv_.n_ctx; }
  uint32_t n_vocab() const override { return m_.spec().n_vocab; }
  void truncate(uint32_t n_keep) override {
    if (n_keep >= tokens_.size()) return;
    tokens_.resize(n_keep);
    drop_copies_after(n_keep);
    if (n_keep < state_.n_past) restore(n_keep);
  }
  SessionStats stats() override { return {.backend = "cpu"}; }
  void set_routing_stats(model::RoutingStats* r) override { forward_.set_routing_stats(r); }

 private:
  cpu::RecurrentState take() { return copies_.take([&] { return cpu::RecurrentState(m_.spec()); }); }
  void keep(cpu::RecurrentState s) { copies_.keep(std::move(s)); }
  void drop_copies_after(uint32_t pos) { copies_.drop_after(pos); }
  // The state of the newest copy at or before pos (the empty state where none is); the KV cache's later entries
  // are written again as the positions after it are recomputed.
  void restore(uint32_t pos) {
    if (const cpu::RecurrentState* c = copies_.at_or_before(pos)) {
      state_ = *c;
    } else {
      state_.clear();
    }
    kv_.n_past = state_.n_past;
  }
  // After a failed batch: nothing of this eval is kept, and the state (advanced in some layers) comes from a copy.
  void roll_back(uint32_t n) {
    tokens_.resize(n);
    drop_copies_after(n);
    restore(n);
  }

  Model& m_;
  cpu::KvCache kv_;
  cpu::RecurrentState state_;
  cpu::HybridForward forward_;
  std::vector<int32_t> tokens_;             // every kept position's token (what a recomputation feeds again)
  model::StateCopies<cpu::RecurrentState> copies_;
  std::vector<float> all_logits_;
  bool rows_all_ = false;
};

}  // namespace

std::unique_ptr<Sequence> new_hybrid_cpu_sequence(Model& model, const cpu::ForwardWeights& weights) {
  return std::make_unique<HybridCpuSequence>(model, weights);
}

}  // namespace df::engine
