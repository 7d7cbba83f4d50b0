// One decode step of several sequences as one forward pass: the rows share every product (each weight, and each
// routed expert, is read once for all of them) but attend each over its own cache. The products take their one-row
// orders, which are what a single-token step takes, so a sequence's logits do not depend on the company it steps in.
#include <cmath>

#include "diskformer/backend/cpu/forward.h"
#include "diskformer/util/check.h"

namespace df::cpu {

Status Forward::run_many(std::span<const int32_t> tokens, std::span<KvCache* const> kvs) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t E = s_.n_embd;
  if (n == 0) return Error{"forward: empty batch"};
  DF_CHECK(kvs.size() == tokens.size());
  for (int64_t t = 0; t < n; ++t) {
    DF_CHECK(kvs[t] != nullptr);
    for (int64_t u = 0; u < t; ++u) DF_CHECK(kvs[u] != kvs[t]);
    if (kvs[t]->n_past + 1 > kvs[t]->n_ctx)
      return Error{"context overflow: sequence " + std::to_string(t) + " of the step has used all " +
                   std::to_string(kvs[t]->n_ctx) + " positions of its context (-c)"};
    if (tokens[t] < 0 || uint32_t(tokens[t]) >= s_.n_vocab)
      return Error{"token id " + std::to_string(tokens[t]) + " of sequence " + std::to_string(t) +
                   " is outside the vocabulary of " + std::to_string(s_.n_vocab)};
  }

  one_row_ = true;
  ensure_size(b_.x, n * E);
  ensure_size(b_.xn, n * E);
  ensure_size(b_.proj, n * E);
  DF_TRY(gather_rows(w_.token_embd, w_.token_rows, tokens, b_.x.data()));

  model::LayerWeights streamed;
  for (uint32_t il = 0; il < s_.n_layer; ++il) {
    DF_ASSIGN(const model::LayerWeights* lw, dense_layer(w_, il, s_.n_layer, layer_pin_, streamed));
    ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
      rms_norm(b_.x.data() + t * E, lw->attn_norm.f32(), E, s_.norm_eps, b_.xn.data() + t * E);
    });
    attention_many(*lw, il, kvs);
    add(ctx_, b_.x.data(), b_.proj.data(), n * E, b_.x.data());
    guess_.clear();
    if (il + 1 < s_.n_layer) guess_experts_many(il + 1, n);
    // Every row is the last of its sequence, so every row feeds forward in the last block too.
    ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
      rms_norm(b_.x.data() + t * E, lw->ffn_norm.f32(), E, s_.norm_eps, b_.xn.data() + t * E);
    });
    if (s_.moe()) {
      DF_TRY(moe_ffn(*lw, il, n));
    } else {
      dense_ffn(*lw, n);
    }
    add(ctx_, b_.x.data(), b_.proj.data(), n * E, b_.x.data());
  }
  layer_pin_.release();
  for (KvCache* kv : kvs) kv->n_past += 1;

  ctx_.for_rows(n, kRowGrain, [&](int64_t t) {
    rms_norm(b_.x.data() + t * E, w_.output_norm.f32(), E, s_.norm_eps, b_.xn.data() + t * E);
  });
  b_.logits.resize(uint64_t(n) * s_.n_vocab);
  matmul(w_.output, b_.xn.data(), n, b_.logits.data());
  stats_.tokens += uint64_t(n);
  return {};
}

void Forward::attention_many(const model::LayerWeights& lw, uint32_t il, std::span<KvCache* const> kvs) {
  const int64_t n = int64_t(kvs.size());
  const int hv = int(s_.head_dim_v);
  const int64_t qd = s_.q_dim(), kd = s_.kv_dim_k(), vd = s_.kv_dim_v(), ad = int64_t(s_.n_head) * hv;
  ensure_size(b_.q, n * qd);
  ensure_size(b_.k, n * kd);
  ensure_size(b_.v, n * vd);
  ensure_size(b_.attn, n * ad);
  const MatmulJob qkv[] = {{&lw.wq, b_.xn.data(), n, b_.q.data(), true},
                           {&lw.wk, b_.xn.data(), n, b_.k.data(), true},
                           {&lw.wv, b_.xn.data(), n, b_.v.data(), true}};
  matmul_many(ctx_, qkv);
  // Each row is one position of its own sequence.
  ctx_.for_rows(n, kRowGrain, [&](int64_t t) { qk_norm(lw, b_.q.data() + t * qd, b_.k.data() + t * kd); });
  // Each sequence attends in its own job: its heads (and, past 512 cells, its cells) spread over the pool.
  for (int64_t t = 0; t < n; ++t) {
    rope_cache_attend(ctx_, s_, *kvs[t], il, 1, b_.q.data() + t * qd, b_.k.data() + t * kd, b_.v.data() + t * vd,
                      b_.attn.data() + t * ad);
  }
  matmul(lw.wo, b_.attn.data(), n, b_.proj.data());
}

void Forward::guess_experts_many(uint32_t next, int64_t n) {
  if (!s_.moe() || !w_.expert_tier || w_.expert_tier->resident() || w_.layers.empty()) return;
  const model::LayerWeights& lw = w_.layers[next];
  std::vector<bool> chosen(s_.n_expert, false);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < n; ++t) {
    cpu::guess_experts(*ctx_.kernels, s_, lw.ffn_norm, lw.gate_inp, b_.x.data() + t * s_.n_embd, ids);
    for (int32_t e : ids)
      if (!chosen[e]) {
        chosen[e] = true;
        guess_.push_back(e);
      }
  }
}

}  // namespace df::cpu
