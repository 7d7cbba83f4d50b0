#include "diskformer/backend/cpu/moe_layer.h"

namespace df::cpu {

void guess_experts(const Kernels& k, const model::ModelSpec& s, const model::Mat& ffn_norm, const model::Mat& router,
                   const float* x, std::vector<int32_t>& out) {
  const int64_t E = s.n_embd, X = s.n_expert;
  std::vector<float> xn(E), p(X);
  rms_norm(x, ffn_norm.f32(), E, s.norm_eps, xn.data());
  Context one{.kernels = &k};
  matmul(one, router, xn.data(), 1, p.data());
  top_k_ids(p.data(), X, s.n_expert_used, out);
}

Status MoeLayer::run(Context& ctx, const MoeLayerArgs& a) {
  const int64_t E = s_.n_embd, X = s_.n_expert, K = s_.n_expert_used, n = a.n_tok;
  router_.grow(uint64_t(n * X));
  expert_out_.grow(uint64_t(n * K * E));
  const MatmulJob route{a.router, a.x, n, router_.data(), a.one_row};
  matmul_many(ctx, std::span<const MatmulJob>(&route, 1));
  route_top_k(ctx, router_.data(), n, X, K, s_.norm_topk, route_);
  expert_uses_ += uint64_t(n * K);
  if (a.routing) a.routing->record(a.layer, route_.sel.data(), n);
  DF_TRY(routed_expert_rows(
      ctx, {.tier = a.tier, .layout = a.layout, .layer = a.layer, .n_expert = X, .n_embd = E, .guess = a.guess},
      route_, n, a.x, expert_out_.data(), scratch_));
  // Weighted sum in routing order, as llama.cpp adds the experts' views one after another.
  ctx.for_rows(n, kRowGrain, [&](int64_t t) {
    float* out = a.out + t * E;
    for (int64_t k = 0; k < K; ++k) {
      const float* eo = expert_out_.data() + (t * K + k) * E;
      const float w = route_.weight[t * K + k];
      for (int64_t i = 0; i < E; ++i) out[i] = k == 0 ? eo[i] * w : out[i] + eo[i] * w;
    }
  });
  return {};
}

}  // namespace df::cpu
