#include "diskformer/backend/cuda/session.h"

#include <algorithm>

#include "backend/cuda/forward.h"
#include "backend/cuda/forward_gemma4.h"
#include "backend/cuda/forward_qwen35.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/cudart/check.h"
#include "diskformer/cudart/pinned.h"
#include "diskformer/util/check.h"

namespace df::cuda {

Result<std::unique_ptr<GpuSession>> GpuSession::create(const GpuModel& model, const GpuSessionOptions& options) {
  if (options.n_ctx == 0 || options.max_batch == 0) return Error{"GPU session: n_ctx and max_batch must be positive"};
  DF_CHECK(model.stream != nullptr && model.weights != nullptr);
  std::unique_ptr<GpuSession> s(new GpuSession(model, options));
  s->opt_.max_batch = std::min(options.max_batch, options.n_ctx);
  // The dense products whose prefill dequantizes tiles (as plan_gpu counts them).
  const GpuWeights& w = *model.weights;
  auto of = [](const model::Mat& m) { return m.data != nullptr && dequant_prefill_type(m.type); };
  bool dequant = of(w.output());
  for (uint32_t il = 0; il < model.spec.n_layer; ++il) {
    const GpuLayer& l = w.layer(il);
    for (const model::Mat* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down, &l.ssm_qkv, &l.ssm_z,
                                &l.ssm_beta, &l.ssm_alpha, &l.ssm_out, &l.gate_shexp, &l.up_shexp, &l.down_shexp})
      dequant = dequant || of(*m);
  }
  const BufferTable table = session_buffers(model.spec, {.n_ctx = s->opt_.n_ctx, .max_batch = s->opt_.max_batch,
                                                         .grouped_experts = options.grouped_experts,
                                                         .streams_experts = model.streamed.has_value(),
                                                         .dequant_tiles = dequant});
  s->buf_.resize(kBufCount);
  SessionWork* work = options.work.get();
  if (work && work->buf.empty()) {
    work->buf.resize(kBufCount);
    for (int b = 0; b < kBufCount; ++b)
      if (table.bytes[size_t(b)] && !session_own(Buf(b))) {
        DF_ASSIGN(work->buf[size_t(b)], DeviceBuffer::alloc(table.bytes[size_t(b)], buf_name(Buf(b))));
      }
  }
  for (int b = 0; b < kBufCount; ++b) {
    const uint64_t bytes = table.bytes[size_t(b)];
    if (!bytes) continue;
    if (work && !session_own(Buf(b))) {
      const DeviceBuffer& shared = work->buf[size_t(b)];
      if (shared.size() < bytes)
        return Error{"GPU session: the shared " + std::string(buf_name(Buf(b))) + " buffer holds " +
                     std::to_string(shared.size()) + " bytes, this session's shape needs " + std::to_string(bytes)};
      s->buf_[size_t(b)] = DeviceBuffer::borrow(shared);
      continue;
    }
    DF_ASSIGN(s->buf_[size_t(b)], DeviceBuffer::alloc(bytes, buf_name(Buf(b))));
  }
  const model::ModelSpec& sp = model.spec;
  if (sp.family == model::Family::kGemma4) {
    // A table for the full layers (their frequencies divided by rope_freqs) and one for the sliding layers; every
    // layer of a kind rotates alike.
    const std::vector<float>& ff = w.rope_freqs();
    for (bool sliding : {false, true}) {
      const model::LayerSpec* kind = nullptr;
      for (const model::LayerSpec& l : sp.layers) {
        if (l.sliding != sliding) continue;
        if (kind && (l.n_rot != kind->n_rot || l.rope_base != kind->rope_base))
          return Error{"GPU session: gemma4 layers of one kind with different RoPE (" + std::to_string(l.n_rot) +
                       " dims, base " + std::to_string(l.rope_base) + ")"};
        kind = &l;
      }
      if (!kind) continue;
      const bool divided = !sliding && !ff.empty();
      if (divided && ff.size() < kind->n_rot / 2)
        return Error{"GPU session: rope_freqs has fewer than n_rot / 2 values"};
      const std::vector<float> rope =
          rope_table(s->opt_.n_ctx, int(kind->n_rot), kind->rope_base, divided ? ff.data() : nullptr);
      s->buf_[size_t(sliding ? Buf::rope_swa : Buf::rope)].upload(rope.data(), rope.size() * 4);
    }
    s->forward_ = std::make_unique<Gemma4Forward>(model, s->buf_, s->opt_);
  } else {
    const std::vector<float> rope = rope_table(s->opt_.n_ctx, int(sp.n_rot), sp.rope_base);
    if (!rope.empty()) s->buf_[size_t(Buf::rope)].upload(rope.data(), rope.size() * 4);
    if (sp.family == model::Family::kQwen35Moe) {
      auto f = std::make_unique<HybridForward>(model, s->buf_, s->opt_);
      s->hybrid_forward_ = f.get();
      s->forward_ = std::move(f);
    } else {
      s->forward_ = std::make_unique<Forward>(model, s->buf_, s->opt_);
    }
  }
  if (sp.n_recurrent() > 0) {
    s->hybrid_ = true;
    DF_CUDA_CHECK(cudaMemsetAsync(s->buf_[size_t(Buf::rec_state)].data(), 0, table[Buf::rec_state], model.stream));
    // Every copy's storage now, so that a failed allocation is an error of create, not of a later eval.
    for (uint32_t i = 0; i < model::kStateSnapshots + 1; ++i) {
      DF_ASSIGN(io::AlignedBuffer b,
                io::AlignedBuffer::allocate(table[Buf::rec_state], 4096, pinned_host_allocator()));
      s->free_.push_back(std::move(b));
    }
    DF_CUDA_CHECK(cudaStreamSynchronize(model.stream));
  }
  return s;
}

GpuSession::GpuSession(const GpuModel& m, const GpuSessionOptions& o) : model_(m), opt_(o) {}

GpuSession::~GpuSession() {
  if (model_.stream) cudaStreamSynchronize(model_.stream);
}

uint64_t GpuSession::cpu_experts_computed() const { return forward_->experts().cpu_experts(); }
ExpertHostTimes GpuSession::expert_host_times() const { return forward_->experts().host_times(); }

Status GpuSession::eval(std::span<const int32_t> tokens, bool all_logits) {
  const model::ModelSpec& s = model_.spec;
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return Error{"GPU forward: empty batch"};
  if (n_past() + n > opt_.n_ctx)
    return Error{"context overflow: " + std::to_string(n_past()) + " positions used + " + std::to_string(n) +
                 " new tokens exceed the context size " + std::to_string(opt_.n_ctx) + " (-c)"};
  for (int64_t t = 0; t < n; ++t)
    if (tokens[t] < 0 || uint32_t(tokens[t]) >= s.n_vocab)
      return Error{"token id " + std::to_string(tokens[t]) + " at batch position " + std::to_string(t) +
                   " is outside the vocabulary of " + std::to_string(s.n_vocab)};
  if (hybrid_) return eval_hybrid(tokens, all_logits);
  return run(tokens, all_logits, 0);
}

Status GpuSession::run(std::span<const int32_t> tokens, bool all_logits, uint32_t lead) {
  const model::ModelSpec& s = model_.spec;
  const int64_t n = int64_t(tokens.size());
  cudaStream_t stream = model_.stream;
  const uint64_t V = s.n_vocab;
  logits_rows_ = all_logits ? uint64_t(n) : 1;
  logits_fresh_ = false;
  DeviceBuffer& logits_dev = buf_[size_t(Buf::logits)];
  if (all_logits) {
    logits_host_.resize(logits_rows_ * V);
    DF_TRY(hold_logits_rows(std::min<uint64_t>(n, opt_.max_batch)));
  }
  for (int64_t b0 = 0; b0 < n; b0 += opt_.max_batch) {
    const int64_t m = std::min<int64_t>(opt_.max_batch, n - b0);
    staging_.resize(2 * m);
    for (int64_t t = 0; t < m; ++t) {
      staging_[t] = tokens[b0 + t];
      staging_[m + t] = int32_t(n_past_ + t);
    }
    DF_TRY(upload_batch(m));
    const uint32_t c1 = n_past_ + uint32_t(m);
    if (lead > n_past_ && lead < c1) hybrid_forward_->save_after(lead - n_past_);
    // A single-token step replays graphs: the whole step's, or where experts stream (their router's choices come to
    // the host every layer, which one graph cannot hold) each segment's between those round trips (forward.h).
    // A captured step replays at any position: no launch may depend on this one (gemma4's sliding layers leave out
    // the window's mask where it masks nothing at the position known).
    const bool step = m == 1 && !all_logits && opt_.decode_graph;
    forward_->set_first_pos(step ? -1 : n_past_);
    if (step && !model_.streamed) {
      step_graph_.run(stream, 0, [&] { forward_->run(1, false, logits_dev.as<float>()); });
    } else {
      forward_->set_replay_segments(step);
      forward_->run(m, all_logits, logits_dev.as<float>());
      forward_->set_replay_segments(false);
    }
    if (Status failed = forward_->experts().take_status(); !failed.ok()) {
      // A streamed expert could not be read: this batch's positions are not kept.
      DF_CUDA_CHECK(cudaStreamSynchronize(stream));
      return failed;
    }
    n_past_ = c1;
    if (lead != 0 && lead == c1)
      DF_CUDA_CHECK(cudaMemcpyAsync(buf_[size_t(Buf::rec_save)].data(), buf_[size_t(Buf::rec_state)].data(),
                                    buf_[size_t(Buf::rec_state)].size(), cudaMemcpyDeviceToDevice, stream));
    last_row_ = all_logits ? uint64_t(m - 1) : 0;
    if (all_logits) {
      DF_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + b0 * V, logits_dev.data(), m * V * 4,
                                    cudaMemcpyDeviceToHost, stream));
    }
    // staging_ is reused by the next batch: the copies above must have read it.
    DF_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  logits_fresh_ = all_logits;
  return {};
}

Status GpuSession::hold_logits_rows(uint64_t rows) {
  if (logits_rows_cap_ >= rows) return {};
  // The captured step and segments write into the old logits buffer.
  step_graph_.clear();
  forward_->drop_graphs();
  DF_ASSIGN(buf_[size_t(Buf::logits)], DeviceBuffer::alloc(rows * model_.spec.n_vocab * 4, "logits"));
  logits_rows_cap_ = rows;
  return {};
}

Status GpuSession::upload_batch(int64_t m) {
  if (model_.ple_rows) DF_TRY(model_.ple_rows->prepare(std::span<const int32_t>(staging_.data(), size_t(m))));
  DF_CUDA_CHECK(cudaMemcpyAsync(buf_[size_t(Buf::tok)].data(), staging_.data(), m * 4, cudaMemcpyHostToDevice,
                                model_.stream));
  DF_CUDA_CHECK(cudaMemcpyAsync(buf_[size_t(Buf::pos)].data(), staging_.data() + m, m * 4, cudaMemcpyHostToDevice,
                                model_.stream));
  return {};
}

bool GpuSession::batch_supported(const model::ModelSpec& spec) {
  // Gemma 4's layers and qwen35moe's recurrent state run forwards of their own.
  return spec.family != model::Family::kGemma4 && spec.n_recurrent() == 0;
}

Status GpuSession::decode_many(std::span<GpuSession* const> ss, std::span<const int32_t> tokens) {
  DF_CHECK(!ss.empty() && ss.size() == tokens.size());
  GpuSession& d = *ss[0];  // whose buffers the pass runs in
  const model::ModelSpec& s = d.model_.spec;
  DF_CHECK(batch_supported(s));
  const int64_t n = int64_t(ss.size());
  if (n > int64_t(d.opt_.max_batch))
    return Error{"GPU decode step: " + std::to_string(n) + " sequences, more than the batch of " +
                 std::to_string(d.opt_.max_batch)};
  for (int64_t i = 0; i < n; ++i) {
    const GpuSession& x = *ss[size_t(i)];
    DF_CHECK(&x.model_ == &d.model_);
    for (int64_t j = 0; j < i; ++j) DF_CHECK(ss[size_t(j)] != &x);
    if (x.n_past_ >= x.opt_.n_ctx)
      return Error{"context overflow: sequence " + std::to_string(i) + " of the step has used all " +
                   std::to_string(x.opt_.n_ctx) + " positions of its context (-c)"};
    if (tokens[size_t(i)] < 0 || uint32_t(tokens[size_t(i)]) >= s.n_vocab)
      return Error{"token id " + std::to_string(tokens[size_t(i)]) + " of sequence " + std::to_string(i) +
                   " is outside the vocabulary of " + std::to_string(s.n_vocab)};
  }
  cudaStream_t stream = d.model_.stream;
  const uint64_t V = s.n_vocab;
  DF_TRY(d.hold_logits_rows(uint64_t(n)));
  const DeviceBuffer& logits_dev = d.buf_[size_t(Buf::logits)];
  d.staging_.resize(size_t(2 * n));
  std::vector<Forward::KvCaches> caches;
  for (int64_t i = 0; i < n; ++i) {
    GpuSession& x = *ss[size_t(i)];
    d.staging_[size_t(i)] = tokens[size_t(i)];
    d.staging_[size_t(n + i)] = int32_t(x.n_past_);
    caches.push_back({x.buf_[size_t(Buf::k_cache)].as<uint16_t>(), x.buf_[size_t(Buf::v_cache)].as<uint16_t>()});
  }
  DF_TRY(d.upload_batch(n));
  d.forward_->set_first_pos(-1);
  d.forward_->set_token_caches(std::move(caches));
  d.forward_->run(n, /*all_logits=*/true, logits_dev.as<float>());
  d.forward_->set_token_caches({});
  if (Status failed = d.forward_->experts().take_status(); !failed.ok()) {
    DF_CUDA_CHECK(cudaStreamSynchronize(stream));
    return failed;
  }
  // Row i to session i's logits buffer, where its device sampler and logits() read the last token's row.
  for (int64_t i = 0; i < n; ++i) {
    GpuSession& x = *ss[size_t(i)];
    if (i > 0)
      DF_CUDA_CHECK(cudaMemcpyAsync(x.buf_[size_t(Buf::logits)].data(), logits_dev.as<float>() + uint64_t(i) * V,
                                    V * 4, cudaMemcpyDeviceToDevice, stream));
    x.n_past_ += 1;
    x.logits_rows_ = 1;
    x.last_row_ = 0;
    x.logits_fresh_ = false;
  }
  DF_CUDA_CHECK(cudaStreamSynchronize(stream));  // staging_ is reused by the next eval
  return {};
}

Status GpuSession::eval_hybrid(std::span<const int32_t> tokens, bool all_logits) {
  // Positions that truncate() kept but whose state was given up go first, in the same batches.
  const uint32_t before = uint32_t(tokens_.size()), start = n_past_;
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  const uint32_t end = uint32_t(tokens_.size());
  const uint32_t lead = model::snapshot_lead(start, end, tokens.size());
  if (Status st = run(std::span<const int32_t>(tokens_).subspan(start), all_logits, lead); !st.ok()) {
    // Nothing of this eval is kept, and the state (advanced in some layers) comes from a copy.
    tokens_.resize(before);
    copies_.drop_after(before);
    restore(before);
    return st;
  }
  if (all_logits) {
    // The caller's rows only, not the recomputed positions'.
    const uint64_t V = model_.spec.n_vocab, skip = before - start;
    logits_host_.erase(logits_host_.begin(), logits_host_.begin() + int64_t(skip * V));
    logits_rows_ = tokens.size();
  }
  if (lead) keep_copy(Buf::rec_save, lead);
  if (tokens.size() >= 2) keep_copy(Buf::rec_state, end);
  return {};
}

void GpuSession::keep_copy(Buf from, uint32_t n_past) {
  HostState c = copies_.take([&] {
    DF_CHECK(!free_.empty());  // a sequence holds at most kStateSnapshots + 1 copies' storage
    HostState h{.bytes = std::move(free_.back())};
    free_.pop_back();
    return h;
  });
  const DeviceBuffer& b = buf_[size_t(from)];
  DF_CHECK(c.bytes.size() == b.size());
  DF_CUDA_CHECK(cudaMemcpyAsync(c.bytes.data(), b.data(), b.size(), cudaMemcpyDeviceToHost, model_.stream));
  DF_CUDA_CHECK(cudaStreamSynchronize(model_.stream));
  c.n_past = n_past;
  copies_.keep(std::move(c));
}

void GpuSession::restore(uint32_t pos) {
  DeviceBuffer& b = buf_[size_t(Buf::rec_state)];
  if (const HostState* c = copies_.at_or_before(pos)) {
    DF_CUDA_CHECK(cudaMemcpyAsync(b.data(), c->bytes.data(), b.size(), cudaMemcpyHostToDevice, model_.stream));
    n_past_ = c->n_past;
  } else {
    DF_CUDA_CHECK(cudaMemsetAsync(b.data(), 0, b.size(), model_.stream));
    n_past_ = 0;
  }
  // The KV cache's entries after n_past_ are written again as the positions after it are recomputed.
  DF_CUDA_CHECK(cudaStreamSynchronize(model_.stream));
}

std::span<const float> GpuSession::logits() {
  const uint64_t V = model_.spec.n_vocab;
  if (!logits_fresh_) {
    DF_CHECK(logits_rows_ == 1);  // all_logits evals copy eagerly
    logits_host_.resize(V);
    // The last token's row: row 0 of a single-row eval, the last row of a batch that kept only it.
    DF_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data(), buf_[size_t(Buf::logits)].data(), V * 4,
                                  cudaMemcpyDeviceToHost, model_.stream));
    DF_CUDA_CHECK(cudaStreamSynchronize(model_.stream));
    logits_fresh_ = true;
  }
  return {logits_host_.data(), logits_rows_ * V};
}

const float* GpuSession::last_logits_device() const {
  DF_CHECK(logits_rows_ > 0);
  // The last row of what the last eval left on the device.
  return buf_[size_t(Buf::logits)].as<float>() + last_row_ * model_.spec.n_vocab;
}

int32_t GpuSession::argmax() {
  const uint64_t V = model_.spec.n_vocab;
  cuda::argmax({.x = last_logits_device(), .n_rows = 1, .n = int64_t(V), .out = buf_[size_t(Buf::next)].as<int32_t>(),
                .stream = model_.stream});
  int32_t id = 0;
  DF_CUDA_CHECK(cudaMemcpyAsync(&id, buf_[size_t(Buf::next)].data(), 4, cudaMemcpyDeviceToHost, model_.stream));
  DF_CUDA_CHECK(cudaStreamSynchronize(model_.stream));
  return id;
}

uint64_t GpuSession::device_bytes() const {
  uint64_t total = 0;
  for (int b = 0; b < kBufCount; ++b)
    if (!opt_.work || session_own(Buf(b))) total += buf_[size_t(b)].size();
  return total;
}

void GpuSession::truncate(uint32_t n_keep) {
  if (!hybrid_) {
    n_past_ = std::min(n_past_, n_keep);
    return;
  }
  if (n_keep >= tokens_.size()) return;
  tokens_.resize(n_keep);
  copies_.drop_after(n_keep);
  if (n_keep < n_past_) restore(n_keep);
}

}  // namespace df::cuda
