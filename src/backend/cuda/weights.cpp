#include "diskformer/backend/cuda/weights.h"

#include <algorithm>

#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/cudart/check.h"
#include "diskformer/cudart/pinned.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

constexpr uint64_t kAlign = 256;
uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// A tensor to put on the device and the view that describes it there.
struct Upload {
  const gguf::TensorInfo* t = nullptr;
  model::Mat* view = nullptr;  // its data becomes the device address
  uint64_t at = 0;             // offset in the arena
  bool matrix = true;          // a product's weights (else F32 norm weights)
};

// Reads the tensors in pieces into two pinned halves of staging memory, each half copied to the device while the
// other is filled.
Status copy_up(model::TensorSource& source, const std::vector<Upload>& list, uint8_t* device_base,
               uint8_t* host_base, const UploadOptions& o, uint64_t* bytes_read) {
  DF_ASSIGN(io::AlignedBuffer staging, io::AlignedBuffer::allocate(o.staging_bytes, 4096, pinned_host_allocator()));
  const uint64_t half = o.staging_bytes / 2;
  cudaStream_t stream = nullptr;
  cudaEvent_t done[2] = {nullptr, nullptr};
  DF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (cudaEvent_t& e : done) DF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  struct Copy {
    uint8_t* dst;
    uint64_t off, n;  // of the half
  };
  std::vector<model::TensorSource::Piece> pieces;
  std::vector<Copy> copies;
  int h = 0;
  uint64_t fill = 0;
  Status status;
  auto flush = [&]() -> Status {
    if (pieces.empty()) return {};
    DF_CUDA_CHECK(cudaEventSynchronize(done[h]));  // the copies that last read this half are done
    DF_TRY(source.read(pieces));
    for (const Copy& c : copies)
      DF_CUDA_CHECK(cudaMemcpyAsync(c.dst, staging.data() + h * half + c.off, c.n, cudaMemcpyHostToDevice, stream));
    DF_CUDA_CHECK(cudaEventRecord(done[h], stream));
    for (const auto& p : pieces) *bytes_read += p.length;
    pieces.clear();
    copies.clear();
    fill = 0;
    h ^= 1;
    return {};
  };
  for (int i = 0; i < 2; ++i) DF_CUDA_CHECK(cudaEventRecord(done[i], stream));
  for (const Upload& u : list) {
    const uint64_t n = u.t->n_bytes;
    if (u.view->data == nullptr && host_base) {  // a host tensor: read straight into its pinned home
      pieces.push_back({u.t, 0, n, host_base + u.at});
      continue;
    }
    for (uint64_t x = 0; x < n;) {
      if (fill == half) {
        status = flush();
        if (!status.ok()) break;
      }
      const uint64_t len = std::min(n - x, half - fill);
      pieces.push_back({u.t, x, len, staging.data() + h * half + fill});
      copies.push_back({device_base + u.at + x, fill, len});
      fill += len;
      x += len;
    }
    if (!status.ok()) break;
  }
  if (status.ok()) status = flush();
  DF_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (cudaEvent_t e : done) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
  return status;
}

}  // namespace

Result<std::unique_ptr<GpuWeights>> GpuWeights::upload(const model::ModelSpec& spec, const model::ModelTensors& t,
                                                       model::TensorSource& source, const UploadOptions& o) {
  std::unique_ptr<GpuWeights> g(new GpuWeights());
  g->layers_.resize(spec.n_layer);
  g->experts_resident_ = spec.moe() && o.experts;
  std::vector<Upload> list;
  auto add = [&](const gguf::TensorInfo* ti, model::Mat* view, bool matrix) {
    if (ti) list.push_back({ti, view, 0, matrix});
  };
  const bool tied = t.output == t.token_embd;
  const bool embd_on_host = o.token_embd_on_host && !tied;
  // Tensors read by the GPU from pinned host RAM.
  auto on_host = [&](const gguf::TensorInfo* ti) {
    return embd_on_host && ti == t.token_embd;
  };
  add(t.token_embd, &g->token_embd_, true);
  add(t.output_norm, &g->output_norm_, false);
  if (!tied) add(t.output, &g->output_, true);
  if (!o.ple_table_streamed) add(t.ple_table, &g->ple_table_, true);
  add(t.ple_model_proj, &g->ple_model_proj_, true);
  add(t.ple_proj_norm, &g->ple_proj_norm_, false);
  add(t.rope_freqs, &g->rope_freqs_, false);
  for (uint32_t il = 0; il < spec.n_layer; ++il) {
    const model::LayerTensors& lt = t.layers[il];
    GpuLayer& l = g->layers_[il];
    add(lt.attn_norm, &l.attn_norm, false), add(lt.wq, &l.wq, true), add(lt.wk, &l.wk, true);
    add(lt.wv, &l.wv, true), add(lt.wo, &l.wo, true), add(lt.q_norm, &l.q_norm, false);
    add(lt.k_norm, &l.k_norm, false), add(lt.ffn_norm, &l.ffn_norm, false), add(lt.ffn_gate, &l.ffn_gate, true);
    add(lt.ffn_up, &l.ffn_up, true), add(lt.ffn_down, &l.ffn_down, true), add(lt.gate_inp, &l.gate_inp, true);
    add(lt.attn_post_norm, &l.attn_post_norm, false), add(lt.ffn_post_norm, &l.ffn_post_norm, false);
    add(lt.out_scale, &l.out_scale, false), add(lt.router_scale, &l.router_scale, false);
    add(lt.ffn_pre_norm_2, &l.ffn_pre_norm_2, false), add(lt.ffn_post_norm_1, &l.ffn_post_norm_1, false);
    add(lt.ffn_post_norm_2, &l.ffn_post_norm_2, false), add(lt.down_exps_scale, &l.down_exps_scale, false);
    add(lt.ple_gate, &l.ple_gate, true), add(lt.ple_proj, &l.ple_proj, true);
    add(lt.ple_post_norm, &l.ple_post_norm, false);
    if (g->experts_resident_) {
      add(lt.gate_exps, &l.gate_exps, true), add(lt.up_exps, &l.up_exps, true), add(lt.down_exps, &l.down_exps, true);
      add(lt.gate_up_exps, &l.gate_exps, true);  // split into its halves below
    }
    add(lt.ssm_qkv, &l.ssm_qkv, true), add(lt.ssm_z, &l.ssm_z, true), add(lt.ssm_conv, &l.ssm_conv, false);
    add(lt.ssm_dt_bias, &l.ssm_dt_bias, false), add(lt.ssm_a, &l.ssm_a, false), add(lt.ssm_beta, &l.ssm_beta, true);
    add(lt.ssm_alpha, &l.ssm_alpha, true), add(lt.ssm_norm, &l.ssm_norm, false), add(lt.ssm_out, &l.ssm_out, true);
    add(lt.gate_inp_shexp, &l.gate_inp_shexp, true), add(lt.gate_shexp, &l.gate_shexp, true);
    add(lt.up_shexp, &l.up_shexp, true), add(lt.down_shexp, &l.down_shexp, true);
  }
  // Every type checked before a byte is read, the streamed experts' and rows' too (the kernels read them from the
  // GPU's caches).
  if (!g->experts_resident_)
    for (const model::LayerTensors& lt : t.layers)
      for (const gguf::TensorInfo* e : {lt.gate_exps, lt.up_exps, lt.down_exps, lt.gate_up_exps})
        if (e) list.push_back({e, nullptr, 0, true});
  if (o.ple_table_streamed && t.ple_table) list.push_back({t.ple_table, nullptr, 0, true});
  for (const Upload& u : list) {
    if (u.matrix && !matmul_type_supported(u.t->type))
      return Error{u.t->name + ": weight type " + std::string(gguf::type_name(u.t->type)) +
                   " has no CUDA kernel (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q2_k, q3_k, " +
                   "q4_k, q5_k, q6_k do)"};
    if (!u.matrix && u.t->type != gguf::GgmlType::F32) return Error{u.t->name + ": norm weights must be f32"};
  }
  std::erase_if(list, [](const Upload& u) { return u.view == nullptr; });
  uint64_t device = 0, host = 0;
  for (Upload& u : list) {
    if (on_host(u.t)) {
      u.at = align_up(host);
      host = u.at + u.t->n_bytes;
      continue;
    }
    u.at = device;
    device += align_up(u.t->n_bytes);
  }
  DF_ASSIGN(g->arena_, DeviceBuffer::alloc(std::max<uint64_t>(device, kAlign), "resident weights"));
  if (host) {
    DF_ASSIGN(g->host_, io::AlignedBuffer::allocate(host, 4096, pinned_host_allocator()));
  }
  uint8_t* dev = g->arena_.as<uint8_t>();
  for (Upload& u : list) {
    *u.view = model::mat_of(*u.t, on_host(u.t) ? nullptr : dev + u.at);
    if (!on_host(u.t)) g->device_bytes_ += u.t->n_bytes;
  }
  DF_TRY(copy_up(source, list, dev, host ? g->host_.data() : nullptr, o, &g->bytes_read_));
  if (host) {
    // The device's address of the pinned rows (every cudaHostAlloc'd block is mapped under unified addressing).
    cudaPointerAttributes a{};
    DF_CUDA_CHECK(cudaPointerGetAttributes(&a, g->host_.data()));
    if (a.type != cudaMemoryTypeHost || a.devicePointer == nullptr)
      return Error{"the GPU cannot read the pinned host rows of the embedding tables (no unified addressing)"};
    for (const Upload& u : list)
      if (on_host(u.t)) *u.view = model::mat_of(*u.t, static_cast<const uint8_t*>(a.devicePointer) + u.at);
  }
  if (t.rope_freqs) {  // small: read back for the session's RoPE table
    g->rope_freqs_host_.resize(t.rope_freqs->n_bytes / 4);
    DF_CUDA_CHECK(cudaMemcpy(g->rope_freqs_host_.data(), g->rope_freqs_.data, t.rope_freqs->n_bytes,
                             cudaMemcpyDeviceToHost));
  }
  if (tied) g->output_ = g->token_embd_;
  if (o.ple_table_streamed && t.ple_table) g->ple_table_ = model::mat_of(*t.ple_table, nullptr);
  // One expert of each stacked tensor, and the stride to the next; a fused gate_up expert's two halves.
  if (g->experts_resident_)
    for (uint32_t il = 0; il < spec.n_layer; ++il) {
      GpuLayer& l = g->layers_[il];
      const bool fused = t.layers[il].gate_up_exps != nullptr;
      for (auto [m, stride] : {std::pair{&l.gate_exps, &l.gate_stride}, std::pair{&l.up_exps, &l.up_stride},
                               std::pair{&l.down_exps, &l.down_stride}}) {
        if (m->data == nullptr) continue;
        const int64_t rows = m->rows / int64_t(spec.n_expert);
        *stride = uint64_t(rows) * m->row_bytes;
        *m = m->slice(0, rows);
      }
      if (fused) {
        const int64_t F = l.gate_exps.rows / 2;
        l.up_exps = l.gate_exps.slice(F, F);
        l.gate_exps = l.gate_exps.slice(0, F);
        l.up_stride = l.gate_stride;
      }
    }
  return g;
}

}  // namespace df::cuda
