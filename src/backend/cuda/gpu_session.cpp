// The forward pass on the GPU, top to bottom as the CPU engine's Forward::run: embedding gather, per layer the
// attention sublayer (norm, q/k/v, qk-norm, RoPE, f16 KV store, attention, output) and the feed-forward sublayer
// (dense SwiGLU, or router + routed experts + combine), each with its residual add; the final norm and the head.
#include <algorithm>
#include <cmath>

#include "diskformer/backend/cuda/gpu_forward.h"
#include "diskformer/util/check.h"

namespace df::cuda {

Result<std::unique_ptr<GpuSession>> GpuSession::create(const GpuModel& model, const GpuSessionOptions& options) {
  if (options.n_ctx == 0 || options.max_batch == 0) return Error{"GPU session: n_ctx and max_batch must be positive"};
  std::unique_ptr<GpuSession> s(new GpuSession(model, options));
  s->opt_.max_batch = std::min(options.max_batch, options.n_ctx);
  DF_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream_, cudaStreamNonBlocking));
  DF_TRY(s->allocate());
  return s;
}

GpuSession::~GpuSession() {
  if (graph_) cudaGraphExecDestroy(graph_);
  if (stream_) cudaStreamDestroy(stream_);
}

Status GpuSession::allocate() {
  const model::ModelSpec& s = model_.spec();
  const uint64_t B = opt_.max_batch, C = opt_.n_ctx, E = s.n_embd;
  const uint64_t K = std::max<uint32_t>(s.n_expert_used, 1);
  const uint64_t ff = std::max<uint64_t>(s.n_ff, uint64_t(s.n_expert_used) * s.n_ff_expert);
  auto f32 = [](uint64_t n) { return n * 4; };
  DF_ASSIGN(k_cache_, DeviceBuffer::alloc(uint64_t(s.n_layer) * C * s.kv_dim_k() * 2, "the KV cache (keys)"));
  DF_ASSIGN(v_cache_, DeviceBuffer::alloc(uint64_t(s.n_layer) * C * s.kv_dim_v() * 2, "the KV cache (values)"));
  rope_table_ = to_device(rope_table(C, int(s.n_rot), s.rope_base));
  DF_ASSIGN(tok_, DeviceBuffer::alloc(B * 4, "token ids"));
  DF_ASSIGN(pos_, DeviceBuffer::alloc(B * 4, "positions"));
  DF_ASSIGN(x_, DeviceBuffer::alloc(f32(B * E), "activations"));
  DF_ASSIGN(xn_, DeviceBuffer::alloc(f32(B * E), "activations"));
  DF_ASSIGN(proj_, DeviceBuffer::alloc(f32(B * E), "activations"));
  DF_ASSIGN(q_, DeviceBuffer::alloc(f32(B * s.q_dim()), "activations"));
  DF_ASSIGN(k_, DeviceBuffer::alloc(f32(B * s.kv_dim_k()), "activations"));
  DF_ASSIGN(v_, DeviceBuffer::alloc(f32(B * s.kv_dim_v()), "activations"));
  DF_ASSIGN(attn_, DeviceBuffer::alloc(f32(B * s.n_head * s.head_dim_v), "activations"));
  DF_ASSIGN(attn_work_, DeviceBuffer::alloc(attention_work_bytes(B, int(s.n_head), int(s.head_dim_v), C),
                                            "attention partial results"));
  DF_ASSIGN(gate_, DeviceBuffer::alloc(f32(B * ff), "activations"));
  DF_ASSIGN(up_, DeviceBuffer::alloc(f32(B * ff), "activations"));
  if (s.moe()) {
    DF_ASSIGN(router_, DeviceBuffer::alloc(f32(B * s.n_expert), "router logits"));
    DF_ASSIGN(ids_, DeviceBuffer::alloc(B * K * 4, "expert ids"));
    DF_ASSIGN(wts_, DeviceBuffer::alloc(f32(B * K), "expert weights"));
    DF_ASSIGN(expert_out_, DeviceBuffer::alloc(f32(B * K * E), "expert outputs"));
    if (opt_.grouped_experts) {
      DF_ASSIGN(order_, DeviceBuffer::alloc(B * K * 4, "expert order"));
      DF_ASSIGN(tiles_, DeviceBuffer::alloc((1 + 3 * moe_max_tiles(B * K, s.n_expert)) * 4, "expert tiles"));
      DF_ASSIGN(gathered_, DeviceBuffer::alloc(f32(B * K * std::max<uint64_t>(E, s.n_ff_expert)), "expert inputs"));
    }
  }
  // The widest input of any product, for the most input vectors (the experts' down projection has B * K).
  const uint64_t max_cols = std::max<uint64_t>({E, uint64_t(s.n_head) * s.head_dim_v, s.n_ff, s.n_ff_expert});
  DF_ASSIGN(scratch_, DeviceBuffer::alloc((max_cols / 32 + 1) * 34 * B * K, "quantized activations"));
  DF_ASSIGN(logits_dev_, DeviceBuffer::alloc(f32(s.n_vocab), "logits"));
  logits_rows_cap_ = 1;
  DF_ASSIGN(next_, DeviceBuffer::alloc(4, "the next token"));
  if (model_.streams_experts()) {  // moe_streamed's device buffers at their largest (it only grows them)
    const uint64_t nk = B * K;
    DF_ASSIGN(act_, DeviceBuffer::alloc(f32(nk * s.n_ff_expert), "streamed experts' activations"));
    DF_ASSIGN(plan_dev_, DeviceBuffer::alloc((2 * nk + 1 + 3 * moe_max_tiles(int64_t(nk), int32_t(nk), 1)) * 4,
                                             "streamed experts' plans"));
    DF_ASSIGN(xq_stream_, DeviceBuffer::alloc(q8_scratch_bytes(gguf::GgmlType::Q8_0, E, B), "quantized activations"));
  }
  return {};
}

Status GpuSession::eval(std::span<const int32_t> tokens, bool all_logits) {
  const model::ModelSpec& s = model_.spec();
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return Error{"GPU forward: empty batch"};
  if (n_past_ + n > opt_.n_ctx)
    return Error{"context overflow: " + std::to_string(n_past_) + " positions used + " + std::to_string(n) +
                 " new tokens exceed the context size " + std::to_string(opt_.n_ctx) + " (-c)"};
  for (int64_t t = 0; t < n; ++t)
    if (tokens[t] < 0 || uint32_t(tokens[t]) >= s.n_vocab)
      return Error{"token id " + std::to_string(tokens[t]) + " at batch position " + std::to_string(t) +
                   " is outside the vocabulary of " + std::to_string(s.n_vocab)};

  const uint64_t V = s.n_vocab;
  logits_rows_ = all_logits ? uint64_t(n) : 1;
  logits_fresh_ = false;
  if (all_logits) {
    logits_host_.resize(logits_rows_ * V);
    const uint64_t need = std::min<uint64_t>(n, opt_.max_batch);
    if (logits_rows_cap_ < need) {
      if (graph_) {  // the captured step writes into the old logits buffer
        DF_CUDA_CHECK(cudaGraphExecDestroy(graph_));
        graph_ = nullptr;
      }
      DF_ASSIGN(logits_dev_, DeviceBuffer::alloc(need * V * 4, "logits"));
      logits_rows_cap_ = need;
    }
  }
  for (int64_t b0 = 0; b0 < n; b0 += opt_.max_batch) {
    const int64_t m = std::min<int64_t>(opt_.max_batch, n - b0);
    staging_.resize(2 * m);
    for (int64_t t = 0; t < m; ++t) {
      staging_[t] = tokens[b0 + t];
      staging_[m + t] = int32_t(n_past_ + t);
    }
    DF_CUDA_CHECK(cudaMemcpyAsync(tok_.data(), staging_.data(), m * 4, cudaMemcpyHostToDevice, stream_));
    DF_CUDA_CHECK(cudaMemcpyAsync(pos_.data(), staging_.data() + m, m * 4, cudaMemcpyHostToDevice, stream_));
    // Streamed experts bring the router's choices to the host every layer, which a graph cannot hold.
    if (m == 1 && !all_logits && opt_.decode_graph && !model_.expert_cache()) {
      decode_step_graph();
    } else {
      forward(m, all_logits, logits_dev_.as<float>());
    }
    if (!stream_status_.ok()) {  // a streamed expert could not be read: this batch's positions are not kept
      DF_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return std::exchange(stream_status_, Status{});
    }
    n_past_ += uint32_t(m);
    if (all_logits) {
      DF_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + b0 * V, logits_dev_.data(), m * V * 4,
                                    cudaMemcpyDeviceToHost, stream_));
    }
    // staging_ is reused by the next batch: the copies above must have read it.
    DF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  logits_fresh_ = all_logits;
  return {};
}

std::span<const float> GpuSession::logits() {
  const uint64_t V = model_.spec().n_vocab;
  if (!logits_fresh_) {
    DF_CHECK(logits_rows_ == 1);  // all_logits evals copy eagerly
    logits_host_.resize(V);
    // The last token's row: row 0 of a single-row eval, the last row of a batch that kept only it.
    DF_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data(), logits_dev_.data(), V * 4, cudaMemcpyDeviceToHost, stream_));
    DF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    logits_fresh_ = true;
  }
  return {logits_host_.data(), logits_rows_ * V};
}

const float* GpuSession::last_logits_device() const {
  DF_CHECK(logits_rows_ > 0);
  // The last row of what the last eval left on the device.
  const uint64_t last_batch_rows = logits_rows_ == 1 ? 1 : (logits_rows_ - 1) % opt_.max_batch + 1;
  return logits_dev_.as<float>() + (last_batch_rows - 1) * model_.spec().n_vocab;
}

int32_t GpuSession::argmax() {
  const uint64_t V = model_.spec().n_vocab;
  cuda::argmax({.x = last_logits_device(), .n_rows = 1, .n = int64_t(V), .out = next_.as<int32_t>(),
                .stream = stream_});
  int32_t id = 0;
  DF_CUDA_CHECK(cudaMemcpyAsync(&id, next_.data(), 4, cudaMemcpyDeviceToHost, stream_));
  DF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return id;
}

uint64_t GpuSession::device_bytes() const {
  uint64_t total = 0;
  for (const DeviceBuffer* b : {&k_cache_, &v_cache_, &rope_table_, &tok_, &pos_, &x_, &xn_, &q_, &k_, &v_, &attn_,
                                &proj_, &gate_, &up_, &router_, &ids_, &wts_, &expert_out_, &order_, &tiles_,
                                &gathered_, &scratch_, &attn_work_, &logits_dev_, &next_, &act_, &plan_dev_, &xq_stream_})
    total += b->size();
  return total;
}

void GpuSession::truncate(uint32_t n_keep) { n_past_ = std::min(n_past_, n_keep); }

void GpuSession::decode_step_graph() {
  if (!graph_) {
    cudaGraph_t g = nullptr;
    DF_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    forward(1, false, logits_dev_.as<float>());
    DF_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    DF_CUDA_CHECK(cudaGraphInstantiate(&graph_, g, 0));
    DF_CUDA_CHECK(cudaGraphDestroy(g));
  }
  DF_CUDA_CHECK(cudaGraphLaunch(graph_, stream_));
}

void GpuSession::forward(int64_t n, bool all_logits, float* logits) {
  const model::ModelSpec& s = model_.spec();
  const int64_t E = s.n_embd;
  float* x = x_.as<float>();
  get_rows({.table = model_.token_embd(), .ids = tok_.as<int32_t>(), .n = n, .out = x, .stream = stream_});
  for (uint32_t il = 0; il < s.n_layer; ++il) {
    const GpuLayer& l = model_.layer(il);
    // Each sublayer norms x into xn and adds its output back into x.
    attention_block(l, il, n);
    ffn_block(l, il, n);
  }
  const int64_t first = all_logits ? 0 : n - 1, n_out = n - first;
  const uint8_t* xq = norm_input(x + first * E, model_.output_norm(), n_out, {&model_.output()});
  matmul({.w = model_.output(), .x = xn_.as<float>(), .n_tok = n_out, .y = logits, .scratch = scratch_.as<uint8_t>(),
          .stream = stream_, .x_q8 = xq});
}

// Norms n rows of the residual stream at x into xn. When every product in ws takes Q8_0 activations of xn, they
// are quantized in the same launch (rms_norm_q8) and returned (in scratch, shared by those products); else nullptr,
// and each product converts its own input.
const uint8_t* GpuSession::norm_input(const float* x, const float* weight, int64_t n,
                                      std::initializer_list<const DMat*> ws) {
  const model::ModelSpec& s = model_.spec();
  const int64_t E = s.n_embd;
  bool q8 = ws.size() > 0;
  for (const DMat* w : ws)
    q8 = q8 && (w->type == gguf::GgmlType::Q4_0 || w->type == gguf::GgmlType::Q8_0) && w->cols == E;
  if (!q8) {
    rms_norm({.x = x, .weight = weight, .y = xn_.as<float>(), .n_rows = n, .cols = E, .eps = s.norm_eps,
              .stream = stream_});
    return nullptr;
  }
  rms_norm_q8({.x = x, .weight = weight, .y = xn_.as<float>(), .y_q8 = scratch_.as<uint8_t>(), .n_rows = n,
               .cols = E, .eps = s.norm_eps, .stream = stream_});
  return scratch_.as<uint8_t>();
}

// The products of xn with up to 3 matrices: one decode_matvec launch for a few tokens when xq holds xn's Q8_0
// blocks and the kernel takes every matrix, else a matmul each (the same results).
void GpuSession::products(int64_t n, const uint8_t* xq, std::initializer_list<std::pair<const DMat*, float*>> outs) {
  DF_CHECK(outs.size() >= 1 && outs.size() <= 3);
  bool fused = xq != nullptr;
  for (const auto& [w, y] : outs)
    fused = fused && decode_matvec_supported(*w, n) && w->type == outs.begin()->first->type;
  if (fused) {
    DecodeMatvecArgs d{.n_parts = int(outs.size()), .x = xn_.as<float>(), .x_q8 = xq, .n_tok = n, .stream = stream_};
    int i = 0;
    for (const auto& [w, y] : outs) d.parts[i++] = {.w = *w, .y = y};
    decode_matvec(d);
    return;
  }
  for (const auto& [w, y] : outs)
    matmul({.w = *w, .x = xn_.as<float>(), .n_tok = n, .y = y, .scratch = scratch_.as<uint8_t>(), .stream = stream_,
            .x_q8 = xq});
}

// x += W in: for a few tokens one decode_matvec launch that adds into x in its epilogue, quantizing `in` in each
// of its blocks while that is at most two batches of Q8_0 blocks per warp (the output projection's 4096 inputs of
// one token; its weight loads are in flight meanwhile), else once beforehand (one small launch); else matmul into
// proj and add (the same roundings).
void GpuSession::add_product(const DMat& w, const float* in, int64_t n) {
  float* x = x_.as<float>();
  if (decode_matvec_supported(w, n)) {
    const bool per_block = n * w.cols <= 4096;
    if (!per_block)
      quantize_q8_0({.x = in, .y = scratch_.as<uint8_t>(), .n_rows = n, .cols = w.cols, .stream = stream_});
    DecodeMatvecArgs d{.n_parts = 1, .x = in, .x_q8 = per_block ? nullptr : scratch_.as<uint8_t>(), .n_tok = n,
                       .stream = stream_};
    d.parts[0] = {.w = w, .y = x, .residual = x};
    decode_matvec(d);
    return;
  }
  matmul({.w = w, .x = in, .n_tok = n, .y = proj_.as<float>(), .scratch = scratch_.as<uint8_t>(), .stream = stream_});
  add({.x = x, .y = proj_.as<float>(), .n = n * int64_t(model_.spec().n_embd), .stream = stream_});
}

void GpuSession::attention_block(const GpuLayer& l, uint32_t il, int64_t n) {
  const model::ModelSpec& s = model_.spec();
  const int hk = int(s.head_dim_k), hv = int(s.head_dim_v);
  const int64_t kd = s.kv_dim_k(), vd = s.kv_dim_v();
  float *q = q_.as<float>(), *k = k_.as<float>(), *v = v_.as<float>();
  const uint8_t* xq = norm_input(x_.as<float>(), l.attn_norm.f32(), n, {&l.wq.m, &l.wk.m, &l.wv.m});
  products(n, xq, {{&l.wq.m, q}, {&l.wk.m, k}, {&l.wv.m, v}});
  const int32_t* pos = pos_.as<int32_t>();
  uint16_t* kc = k_cache_.as<uint16_t>() + uint64_t(il) * opt_.n_ctx * kd;
  uint16_t* vc = v_cache_.as<uint16_t>() + uint64_t(il) * opt_.n_ctx * vd;
  // q-norm, k-norm, RoPE and the f16 KV store in one launch.
  qk_norm_rope_store({.q = q, .k = k, .v = v, .q_norm = s.qk_norm ? l.q_norm.f32() : nullptr,
                      .k_norm = s.qk_norm ? l.k_norm.f32() : nullptr, .eps = s.norm_eps, .n_head = int(s.n_head),
                      .n_head_kv = int(s.n_head_kv), .head_dim_k = hk, .head_dim_v = hv, .n_rot = int(s.n_rot),
                      .n_tok = n, .pos = pos, .table = rope_table_.as<float>(), .n_pos = opt_.n_ctx,
                      .style = s.rope_style, .k_cache = kc, .v_cache = vc, .n_ctx = opt_.n_ctx, .stream = stream_});
  attention({.q = q, .k = kc, .v = vc, .out = attn_.as<float>(), .pos = pos, .n_head = int(s.n_head),
             .n_head_kv = int(s.n_head_kv), .head_dim_k = hk, .head_dim_v = hv, .n_tok = n,
             .scale = 1.0f / std::sqrt(float(hk)), .stream = stream_, .n_ctx = opt_.n_ctx,
             .work = attn_work_.as<float>()});
  add_product(l.wo.m, attn_.as<float>(), n);
}

void GpuSession::ffn_block(const GpuLayer& l, uint32_t il, int64_t n) {
  const model::ModelSpec& s = model_.spec();
  const float* xn = xn_.as<float>();
  uint8_t* scratch = scratch_.as<uint8_t>();
  float *gate = gate_.as<float>(), *up = up_.as<float>();
  if (!s.moe()) {
    const uint8_t* xq = norm_input(x_.as<float>(), l.ffn_norm.f32(), n, {&l.ffn_gate.m, &l.ffn_up.m});
    products(n, xq, {{&l.ffn_gate.m, gate}, {&l.ffn_up.m, up}});
    swiglu({.gate = gate, .up = up, .y = gate, .n = n * int64_t(s.n_ff), .stream = stream_});
    add_product(l.ffn_down.m, gate, n);
    return;
  }
  const int K = int(s.n_expert_used);
  int32_t* ids = ids_.as<int32_t>();
  // A few tokens with resident quantized experts: router, then two launches for the experts (gate and up with the
  // SwiGLU and the Q8_0 of its output; down with the weighted combine and the residual add).
  // Streamed experts live in the cache's slots, which have the layout of the file's experts.
  GpuExpertCache* cache = model_.expert_cache();
  const DMat& gate_w = cache ? cache->gate() : l.gate_exps.m;
  const DMat& up_w = cache ? cache->up() : l.up_exps.m;
  const DMat& down_w = cache ? cache->down() : l.down_exps.m;
  const bool fused = n <= kDecodeMaxTok && moe_decode_supported(gate_w, up_w, down_w, n, K);
  const uint8_t* xq = fused ? norm_input(x_.as<float>(), l.ffn_norm.f32(), n, {&gate_w, &up_w})
                            : norm_input(x_.as<float>(), l.ffn_norm.f32(), n, {});
  matmul({.w = l.gate_inp.m, .x = xn, .n_tok = n, .y = router_.as<float>(), .scratch = scratch, .stream = stream_,
          .x_q8 = xq});
  route({.logits = router_.as<float>(), .n_tok = n, .n_expert = int(s.n_expert), .n_used = K,
         .norm_topk = s.norm_topk, .ids = ids, .weights = wts_.as<float>(), .stream = stream_});
  if (cache) {
    moe_streamed(*cache, il, n, xq, fused);
    return;
  }
  if (fused) {
    // up_ holds the experts' Q8_0 activations ([n * K][n_ff_expert / 32] blocks, fewer bytes than its floats).
    uint8_t* act_q8 = up_.as<uint8_t>();
    moe_decode_gate_up({.gate = l.gate_exps.m, .up = l.up_exps.m, .gate_stride = l.gate_stride,
                        .up_stride = l.up_stride, .n_expert = int32_t(s.n_expert), .ids = ids, .n_tok = n,
                        .n_used = K, .x_q8 = xq, .act_q8 = act_q8, .stream = stream_});
    moe_decode_down({.down = l.down_exps.m, .down_stride = l.down_stride, .n_expert = int32_t(s.n_expert),
                     .ids = ids, .weights = wts_.as<float>(), .n_tok = n, .n_used = K, .act_q8 = act_q8,
                     .x = x_.as<float>(), .out = x_.as<float>(), .stream = stream_});
    return;
  }
  if (opt_.grouped_experts && n > 1) {
    const int64_t n_slots = n * K;
    // Quantized experts take tiles of 32 slots on the tensor cores (tiles_ is sized for 8, which needs the most).
    const int32_t ts = std::min({moe_tile_slots(l.gate_exps.m.type), moe_tile_slots(l.up_exps.m.type),
                                 moe_tile_slots(l.down_exps.m.type)});
    moe_plan({.ids = ids, .n_slots = n_slots, .n_expert = int32_t(s.n_expert), .order = order_.as<int32_t>(),
              .tiles = tiles_.as<int32_t>(), .stream = stream_, .tile_slots = ts});
    const MoeGroupedMatmulArgs gb{.n_expert = int32_t(s.n_expert), .order = order_.as<int32_t>(),
                                  .tiles = tiles_.as<int32_t>(), .n_slots = n_slots, .n_used = K,
                                  .gathered = gathered_.as<float>(), .scratch = scratch, .stream = stream_,
                                  .tile_slots = ts};
    MoeGroupedMatmulArgs g = gb, u = gb, d = gb;
    g.w = l.gate_exps.m, g.expert_stride = l.gate_stride, g.x = xn, g.y = gate;
    u.w = l.up_exps.m, u.expert_stride = l.up_stride, u.x = xn, u.y = up;
    if (ts > 8) {  // gate and up read the same Q8_0 rows of xn, one per token
      quantize_q8_0({.x = xn, .y = scratch, .n_rows = n, .cols = int64_t(s.n_embd), .stream = stream_});
      g.x_q8 = u.x_q8 = scratch;
    }
    moe_matmul_grouped(g);
    moe_matmul_grouped(u);
    swiglu({.gate = gate, .up = up, .y = gate, .n = n_slots * int64_t(s.n_ff_expert), .stream = stream_});
    d.w = l.down_exps.m, d.expert_stride = l.down_stride, d.x = gate, d.x_per_slot = true,
    d.y = expert_out_.as<float>();
    moe_matmul_grouped(d);
  } else {
    moe_ungrouped(l, n);
  }
  moe_combine({.expert_out = expert_out_.as<float>(), .weights = wts_.as<float>(), .out = proj_.as<float>(),
               .n_tok = n, .n_embd = int64_t(s.n_embd), .n_used = K, .stream = stream_});
  add({.x = x_.as<float>(), .y = proj_.as<float>(), .n = n * int64_t(s.n_embd), .stream = stream_});
}

// The routed experts one (token, slot) per block column: decode, and batches without grouped_experts.
void GpuSession::moe_ungrouped(const GpuLayer& l, int64_t n) {
  const model::ModelSpec& s = model_.spec();
  const int K = int(s.n_expert_used);
  const float* xn = xn_.as<float>();
  uint8_t* scratch = scratch_.as<uint8_t>();
  float *gate = gate_.as<float>(), *up = up_.as<float>();
  int32_t* ids = ids_.as<int32_t>();
  const MoeMatmulArgs base{.n_expert = int32_t(s.n_expert), .ids = ids, .n_tok = n, .n_used = K,
                           .scratch = scratch, .stream = stream_};
  MoeMatmulArgs g = base, u = base, d = base;
  g.w = l.gate_exps.m, g.expert_stride = l.gate_stride, g.x = xn, g.y = gate;
  u.w = l.up_exps.m, u.expert_stride = l.up_stride, u.x = xn, u.y = up;
  moe_matmul(g);
  moe_matmul(u);
  swiglu({.gate = gate, .up = up, .y = gate, .n = n * K * int64_t(s.n_ff_expert), .stream = stream_});
  d.w = l.down_exps.m, d.expert_stride = l.down_stride, d.x = gate, d.x_per_slot = true,
  d.y = expert_out_.as<float>();
  moe_matmul(d);
}

}  // namespace df::cuda
