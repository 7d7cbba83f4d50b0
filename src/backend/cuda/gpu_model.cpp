// Uploading a model's weights to the GPU from any WeightSource (the CPU engine's disk tier reads them from the file).
#include <algorithm>
#include <numeric>

#include "diskformer/backend/cuda/gpu_forward.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

std::string layer_name(uint32_t il, const char* t) { return "blk." + std::to_string(il) + "." + t; }

Status check_shape(const model::Mat& m, int64_t rows, int64_t cols, const std::string& what) {
  if (m.rows != rows || m.cols != cols)
    return Error{what + ": shape " + std::to_string(m.rows) + " x " + std::to_string(m.cols) + ", the spec needs " +
                 std::to_string(rows) + " x " + std::to_string(cols)};
  return {};
}

// The device address of host memory the GPU can read (pinned, mapped: every cudaHostAlloc'd block under unified
// addressing); nullptr for pageable memory.
const uint8_t* device_view(const uint8_t* host) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, host) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return a.type == cudaMemoryTypeHost && a.devicePointer ? static_cast<const uint8_t*>(a.devicePointer) : nullptr;
}

}  // namespace

Result<DTensor> GpuModel::put(const model::Mat& m, const std::string& what) {
  DTensor t;
  if (m.data == nullptr) return t;
  if (!matmul_type_supported(m.type))
    return Error{what + ": weight type " + std::to_string(unsigned(m.type)) +
                 " has no CUDA kernel (F32, F16, BF16, Q8_0, Q4_0 do)"};
  const uint64_t bytes = m.row_bytes * uint64_t(m.rows);
  const uint64_t padded = (bytes + 255) / 256 * 256;
  uint8_t* dst = nullptr;
  if (arena_used_ + padded <= arena_.size()) {
    dst = arena_.as<uint8_t>() + arena_used_;
    arena_.upload(m.data, bytes, arena_used_);
    arena_used_ += padded;
  } else {
    DF_ASSIGN(t.buf, DeviceBuffer::alloc(bytes, what));
    t.buf.upload(m.data, bytes);
    dst = t.buf.as<uint8_t>();
  }
  t.m = {m.type, dst, m.cols, m.rows, m.row_bytes};
  bytes_ += bytes;
  return t;
}

Result<std::unique_ptr<GpuModel>> GpuModel::upload(const model::ModelSpec& spec, model::WeightSource& w,
                                                  const GpuUploadOptions& options) {
  std::unique_ptr<GpuModel> g(new GpuModel());
  g->spec_ = spec;
  g->source_ = &w;
  g->streams_experts_ = options.stream_experts && spec.moe();
  if (options.arena_bytes) {
    DF_ASSIGN(g->arena_, DeviceBuffer::alloc(options.arena_bytes, "resident weights"));
  }
  const int64_t E = spec.n_embd;
  DF_TRY(check_shape(w.token_embd(), spec.n_vocab, E, "token_embd"));
  const model::Mat& te = w.token_embd();
  if (const uint8_t* dev = options.token_embd_on_host && w.output().data != te.data ? device_view(te.data) : nullptr) {
    g->token_embd_.m = {te.type, dev, te.cols, te.rows, te.row_bytes};  // rows gathered over the link
  } else {
    DF_ASSIGN(g->token_embd_, g->put(te, "token_embd"));
  }
  if (w.output_norm().type != gguf::GgmlType::F32) return Error{"output_norm: not F32"};
  DF_ASSIGN(g->output_norm_, g->put(w.output_norm(), "output_norm"));
  DF_TRY(check_shape(w.output(), spec.n_vocab, E, "output"));
  if (w.output().data == w.token_embd().data) {
    g->output_shared_ = true;
  } else {
    DF_ASSIGN(g->output_, g->put(w.output(), "output"));
  }

  g->layers_.resize(spec.n_layer);
  for (uint32_t il = 0; il < spec.n_layer; ++il) {
    DF_ASSIGN(const model::LayerWeights* lw, w.layer(il));
    GpuLayer& l = g->layers_[il];
    const std::pair<const model::Mat*, DTensor*> dense[] = {
        {&lw->attn_norm, &l.attn_norm}, {&lw->wq, &l.wq},           {&lw->wk, &l.wk},
        {&lw->wv, &l.wv},               {&lw->wo, &l.wo},           {&lw->q_norm, &l.q_norm},
        {&lw->k_norm, &l.k_norm},       {&lw->ffn_norm, &l.ffn_norm}, {&lw->ffn_gate, &l.ffn_gate},
        {&lw->ffn_up, &l.ffn_up},       {&lw->ffn_down, &l.ffn_down}, {&lw->gate_inp, &l.gate_inp}};
    const char* names[] = {"attn_norm", "attn_q",   "attn_k",   "attn_v",   "attn_output", "attn_q_norm",
                           "attn_k_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",    "ffn_gate_inp"};
    for (size_t i = 0; i < std::size(dense); ++i) {
      DF_ASSIGN(*dense[i].second, g->put(*dense[i].first, layer_name(il, names[i])));
    }
    for (const DTensor* norm : {&l.attn_norm, &l.q_norm, &l.k_norm, &l.ffn_norm})
      if (norm->present() && norm->m.type != gguf::GgmlType::F32)
        return Error{layer_name(il, "norm") + ": norm weights must be F32"};
    if (!l.attn_norm.present() || !l.ffn_norm.present() || !l.wq.present() || !l.wk.present() || !l.wv.present() ||
        !l.wo.present())
      return Error{layer_name(il, "attn") + ": the layer lacks an attention tensor or a norm"};
    if (spec.qk_norm && (!l.q_norm.present() || !l.k_norm.present()))
      return Error{layer_name(il, "attn_q_norm") + ": the spec needs q/k norms"};

    if (!spec.moe()) {
      if (!l.ffn_gate.present() || !l.ffn_up.present() || !l.ffn_down.present())
        return Error{layer_name(il, "ffn") + ": a dense layer lacks ffn_gate, ffn_up or ffn_down"};
      continue;
    }
    if (!l.gate_inp.present()) return Error{layer_name(il, "ffn_gate_inp") + ": missing in a MoE model"};
    if (options.stream_experts) continue;  // the expert cache brings them on demand
    // All experts, in chunks the source can hand out at once; each lands at its id's place in the stacked tensors.
    const uint32_t X = spec.n_expert, chunk = w.max_experts_per_call() ? w.max_experts_per_call() : X;
    const int64_t F = spec.n_ff_expert;
    for (uint32_t c0 = 0; c0 < X; c0 += chunk) {
      std::vector<int32_t> ids(std::min(chunk, X - c0));
      std::iota(ids.begin(), ids.end(), int32_t(c0));
      DF_ASSIGN(std::vector<model::ExpertWeights> ew, w.experts(il, ids));
      DF_CHECK(ew.size() == ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        const std::pair<const model::Mat*, std::pair<DTensor*, uint64_t*>> parts[] = {
            {&ew[i].gate, {&l.gate_exps, &l.gate_stride}},
            {&ew[i].up, {&l.up_exps, &l.up_stride}},
            {&ew[i].down, {&l.down_exps, &l.down_stride}}};
        for (int p = 0; p < 3; ++p) {
          const model::Mat& m = *parts[p].first;
          DTensor& t = *parts[p].second.first;
          uint64_t& stride = *parts[p].second.second;
          const std::string what = layer_name(il, p == 0 ? "ffn_gate_exps" : p == 1 ? "ffn_up_exps" : "ffn_down_exps");
          DF_TRY(check_shape(m, p == 2 ? E : F, p == 2 ? F : E, what + " (one expert)"));
          if (!matmul_type_supported(m.type)) return Error{what + ": weight type has no CUDA kernel"};
          if (!t.present()) {
            stride = m.row_bytes * uint64_t(m.rows);
            DF_ASSIGN(t.buf, DeviceBuffer::alloc(stride * X, what));
            t.m = {m.type, t.buf.as<uint8_t>(), m.cols, m.rows, m.row_bytes};
            g->bytes_ += stride * X;
          }
          if (m.type != t.m.type || m.row_bytes != t.m.row_bytes)
            return Error{what + ": experts differ in type or row size"};
          t.buf.upload(m.data, stride, stride * uint64_t(ids[i]));
        }
      }
    }
  }
  return g;
}

Status GpuModel::stream_experts(uint32_t slots) {
  DF_CHECK(source_ != nullptr && streams_experts_);
  expert_cache_.reset();  // a new size replaces the old cache (its memory first)
  DF_ASSIGN(expert_cache_, GpuExpertCache::create(spec_, *source_, slots));
  return {};
}

Result<uint64_t> GpuModel::expert_slot_bytes() const {
  DF_CHECK(source_ != nullptr);
  return GpuExpertCache::slot_bytes(spec_, *source_);
}

}  // namespace df::cuda
