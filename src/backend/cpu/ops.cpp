#include "diskformer/backend/cpu/ops.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels_impl.h"
#include "diskformer/backend/cpu/dequant.h"
#include "diskformer/util/check.h"

namespace df::cpu {

using gguf::GgmlType;

void Context::parallel(int64_t n_tasks, const std::function<void(int64_t)>& fn, const std::function<void()>& beside) {
  if (pool) {
    pool->run(n_tasks, fn, beside);
  } else {
    if (beside) beside();
    for (int64_t t = 0; t < n_tasks; ++t) fn(t);
  }
}

void Context::for_ranges(int64_t n, int64_t align, int64_t grain,
                         const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t tasks = std::min(threads, n / std::max<int64_t>(grain, 1));
  if (tasks <= 1) {
    fn(0, n);
    return;
  }
  const int64_t chunk = ((n + tasks - 1) / tasks + align - 1) / align * align;
  parallel((n + chunk - 1) / chunk, [&](int64_t t) { fn(t * chunk, std::min(n, (t + 1) * chunk)); });
}

void Context::for_rows(int64_t n, int64_t grain, const std::function<void(int64_t)>& fn) {
  for_ranges(n, 1, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) fn(r);
  });
}

namespace {

// The activation format llama.cpp's CPU backend pairs with each weight type (its vec_dot_type): Q8_0 for the
// 32-blocks with one scale, Q8_1 (with block sums) for those with an offset, Q8_K for the 256-blocks, f16 / bf16 for
// the half types, f32 otherwise; with MatmulJob::cuda_order the 256-blocks take Q8_0, the CUDA backend's.
enum class ActFormat { kF32, kF16, kBF16, kQ8_0, kQ8_1, kQ8_K };

ActFormat llama_act_format(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL: return ActFormat::kQ8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return ActFormat::kQ8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: return ActFormat::kQ8_K;
    case GgmlType::F16: return ActFormat::kF16;
    case GgmlType::BF16: return ActFormat::kBF16;
    default: return ActFormat::kF32;
  }
}

// The types with a product in the CUDA decode order (Kernels::dot_q4_k_q8_0 and its kin): the Q8_K ones.
bool cuda_order_type(GgmlType t) { return llama_act_format(t) == ActFormat::kQ8_K; }

ActFormat act_format(GgmlType t, bool cuda_order = false) {
  return cuda_order && cuda_order_type(t) ? ActFormat::kQ8_0 : llama_act_format(t);
}

// Bytes of one activation row converted for weights of type t.
uint64_t act_row_bytes(GgmlType t, int64_t cols, bool cuda_order) {
  switch (act_format(t, cuda_order)) {
    case ActFormat::kQ8_0: return uint64_t(cols / kQK) * sizeof(BlockQ8_0);
    case ActFormat::kQ8_1: return uint64_t(cols / kQK) * sizeof(BlockQ8_1);
    case ActFormat::kQ8_K: return uint64_t(cols / kQK_K) * sizeof(BlockQ8_K);
    case ActFormat::kF16:
    case ActFormat::kBF16: return uint64_t(cols) * 2;
    case ActFormat::kF32: break;
  }
  return uint64_t(cols) * 4;
}

void convert_act(const Kernels& k, GgmlType t, bool cuda_order, const float* x, int64_t cols, uint8_t* dst) {
  switch (act_format(t, cuda_order)) {
    case ActFormat::kQ8_0: k.quantize_q8_0(x, reinterpret_cast<BlockQ8_0*>(dst), cols); break;
    case ActFormat::kQ8_1: k.quantize_q8_1(x, reinterpret_cast<BlockQ8_1*>(dst), cols); break;
    case ActFormat::kQ8_K: k.quantize_q8_k(x, reinterpret_cast<BlockQ8_K*>(dst), cols); break;
    case ActFormat::kF16: k.to_f16(x, reinterpret_cast<uint16_t*>(dst), cols); break;
    case ActFormat::kBF16: k.to_bf16(x, reinterpret_cast<uint16_t*>(dst), cols); break;
    case ActFormat::kF32: std::copy(x, x + cols, reinterpret_cast<float*>(dst)); break;
  }
}

template <typename W, typename A>
float dot_as(float (*dot)(int64_t, const W*, const A*), int64_t n, const uint8_t* w, const uint8_t* a) {
  return dot(n, reinterpret_cast<const W*>(w), reinterpret_cast<const A*>(a));
}

// How llama.cpp's x86 CPU backend orders a product (kernels.h): Q4_0, IQ4_NL and Q4_K matrices whose row count
// is a multiple of 8 go through its 8-row interleaved kernels (Q4_K: a batched order for groups of four
// activation rows, the rest row by row); f32 and f16 products with several activation rows through tinyBLAS where
// its tiles fit (columns a multiple of 8, rows of 4), otherwise its one-row vector routine; the other IQ4_NL
// matrices with several activation rows through tinyBLAS too (any shape), whose order differs from its vec_dot's.
struct DotOrder {
  bool x8 = false;
  bool single = false;
  bool batch = false;   // several activation rows of a dense product (mul_mat, not the experts' mul_mat_id)
  bool cuda = false;    // the CUDA decode order (MatmulJob::cuda_order)
  int64_t grouped = 0;  // activation rows [0, grouped) take the batched Q4_K order (llama.cpp groups them by four)
};

DotOrder dot_order(const MatmulJob& jb) {
  const model::Mat& w = *jb.w;
  const bool cuda = jb.cuda_order && cuda_order_type(w.type);
  const bool interleavable = w.type == GgmlType::Q4_0 || w.type == GgmlType::IQ4_NL || w.type == GgmlType::Q4_K;
  const bool tiles = w.cols % 8 == 0 && w.rows % 4 == 0;
  DotOrder o{.x8 = interleavable && w.rows % 8 == 0 && !cuda, .single = jb.per_row || jb.n_tok == 1 || !tiles,
             .batch = !jb.per_row && jb.n_tok > 1, .cuda = cuda};
  if (o.x8 && w.type == GgmlType::Q4_K && !jb.per_row && jb.n_tok >= 4) o.grouped = jb.n_tok - jb.n_tok % 4;
  return o;
}

// A row of a cuda_order_type in the CUDA decode order.
float dot_row_cuda(const Kernels& k, GgmlType t, int64_t n, const uint8_t* w, const uint8_t* a) {
  switch (t) {
    case GgmlType::Q2_K: return dot_as(k.dot_q2_k_q8_0, n, w, a);
    case GgmlType::Q3_K: return dot_as(k.dot_q3_k_q8_0, n, w, a);
    case GgmlType::Q4_K: return dot_as(k.dot_q4_k_q8_0, n, w, a);
    case GgmlType::Q5_K: return dot_as(k.dot_q5_k_q8_0, n, w, a);
    case GgmlType::Q6_K: return dot_as(k.dot_q6_k_q8_0, n, w, a);
    default: DF_CHECK(t == GgmlType::IQ4_XS); return dot_as(k.dot_iq4_xs_q8_0, n, w, a);
  }
}

float dot_row(const Kernels& k, GgmlType t, DotOrder o, int64_t n, const uint8_t* w, const uint8_t* a) {
  if (o.cuda) return dot_row_cuda(k, t, n, w, a);
  switch (t) {
    case GgmlType::Q4_0: return dot_as(o.x8 ? k.dot_q4_0_q8_0_x8 : k.dot_q4_0_q8_0, n, w, a);
    case GgmlType::Q8_0: return dot_as(k.dot_q8_0_q8_0, n, w, a);
    case GgmlType::Q4_1: return dot_as(k.dot_q4_1_q8_1, n, w, a);
    case GgmlType::Q5_0: return dot_as(k.dot_q5_0_q8_0, n, w, a);
    case GgmlType::Q5_1: return dot_as(k.dot_q5_1_q8_1, n, w, a);
    case GgmlType::IQ4_NL:
      return dot_as(o.x8 ? k.dot_iq4_nl_q8_0_x8 : o.batch ? k.dot_iq4_nl_q8_0_batch : k.dot_iq4_nl_q8_0, n, w, a);
    case GgmlType::Q2_K: return dot_as(k.dot_q2_k_q8_k, n, w, a);
    case GgmlType::Q3_K: return dot_as(k.dot_q3_k_q8_k, n, w, a);
    case GgmlType::Q4_K: return dot_as(o.x8 ? k.dot_q4_k_q8_k_x8 : k.dot_q4_k_q8_k, n, w, a);
    case GgmlType::Q5_K: return dot_as(k.dot_q5_k_q8_k, n, w, a);
    case GgmlType::Q6_K: return dot_as(k.dot_q6_k_q8_k, n, w, a);
    case GgmlType::IQ4_XS: return dot_as(k.dot_iq4_xs_q8_k, n, w, a);
    case GgmlType::F16: return dot_as(o.single ? k.dot_f16_single : k.dot_f16, n, w, a);
    case GgmlType::BF16: return dot_as(o.single ? k.dot_bf16_single : k.dot_bf16, n, w, a);
    default: return dot_as(o.single ? k.dot_f32_single : k.dot_f32, n, w, a);
  }
}

}  // namespace

bool rounds_as_cuda_decode(GgmlType t) {
  switch (act_format(t, true)) {
    case ActFormat::kQ8_0:  // the GPU's activations, bit for bit (cuda/quantize.cu)
    case ActFormat::kQ8_1:  // the same codes; the offsets' block sums rounded to f16
    case ActFormat::kF32:
    case ActFormat::kF16:
    case ActFormat::kBF16: return true;
    case ActFormat::kQ8_K: break;
  }
  return false;
}

void matmul(Context& ctx, const model::Mat& w, const float* x, int64_t n_tok, float* y) {
  const MatmulJob job{&w, x, n_tok, y};
  matmul_many(ctx, std::span<const MatmulJob>(&job, 1));
}

void matmul_many(Context& ctx, std::span<const MatmulJob> jobs, const std::function<void()>& beside) {
  const Kernels& k = *ctx.kernels;
  // Activations of every job converted once, each job in its own region, except that a job whose input and format
  // are those of the job before it reads that job's (q, k and v of a layer; an expert's gate and up; experts that
  // all take one token's row); f32 products read their input where it is.
  std::vector<uint64_t> act_off(jobs.size(), 0);
  std::vector<size_t> converts;  // the jobs whose activations are converted
  uint64_t act_bytes = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const MatmulJob& jb = jobs[i];
    DF_CHECK(jb.w->data != nullptr && model::matmul_type_supported(jb.w->type));
    if (i > 0 && jb.x == jobs[i - 1].x && jb.n_tok == jobs[i - 1].n_tok && jb.w->cols == jobs[i - 1].w->cols &&
        act_format(jb.w->type, jb.cuda_order) == act_format(jobs[i - 1].w->type, jobs[i - 1].cuda_order)) {
      act_off[i] = act_off[i - 1];
      continue;
    }
    if (act_format(jb.w->type, jb.cuda_order) == ActFormat::kF32) continue;
    act_off[i] = act_bytes;
    act_bytes += act_row_bytes(jb.w->type, jb.w->cols, jb.cuda_order) * uint64_t(std::max<int64_t>(jb.n_tok, 0));
    converts.push_back(i);
  }
  ctx.act.grow(act_bytes);
  auto act_of = [&](size_t i) {
    return act_format(jobs[i].w->type, jobs[i].cuda_order) == ActFormat::kF32
               ? reinterpret_cast<const uint8_t*>(jobs[i].x)
               : ctx.act.data() + act_off[i];
  };
  // Converted in parallel, a row range per task: a prefill batch has thousands of rows (the routed experts' copies
  // of their tokens), which one thread would convert while the others wait.
  int64_t n_rows = 0;
  const int64_t act_chunk = 16;
  std::vector<std::pair<size_t, int64_t>> act_tasks;  // (job, first row)
  for (const size_t i : converts) {
    n_rows += std::max<int64_t>(jobs[i].n_tok, 0);
    for (int64_t t = 0; t < jobs[i].n_tok; t += act_chunk) act_tasks.push_back({i, t});
  }
  auto convert = [&](int64_t ti) {
    const auto [ji, t0] = act_tasks[size_t(ti)];
    const auto& jb = jobs[ji];
    const uint64_t arb = act_row_bytes(jb.w->type, jb.w->cols, jb.cuda_order);
    for (int64_t t = t0; t < std::min(jb.n_tok, t0 + act_chunk); ++t)
      convert_act(k, jb.w->type, jb.cuda_order, jb.x + t * jb.w->cols, jb.w->cols,
                  ctx.act.data() + act_off[ji] + t * arb);
  };
  if (n_rows > act_chunk) {
    ctx.parallel(int64_t(act_tasks.size()), convert);
  } else {
    for (int64_t ti = 0; ti < int64_t(act_tasks.size()); ++ti) convert(ti);
  }
  // Row chunks of all jobs in one task list: enough tasks to balance the threads, each long enough to amortize
  // its start.
  int64_t total_rows = 0;
  for (const auto& jb : jobs) total_rows += jb.n_tok > 0 ? jb.w->rows : 0;
  const int threads = ctx.pool ? ctx.pool->size() : 1;
  // A multiple of 8, so that the 8-row kernels see whole groups.
  const int64_t chunk = (std::max<int64_t>(8, total_rows / (threads * 8)) + 7) / 8 * 8;
  std::vector<std::pair<size_t, int64_t>> tasks;  // (job, first row)
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].n_tok <= 0) continue;
    for (int64_t r = 0; r < jobs[i].w->rows; r += chunk) tasks.push_back({i, r});
    ctx.weight_bytes_read += jobs[i].w->row_bytes * uint64_t(jobs[i].w->rows);
  }
  ctx.parallel(int64_t(tasks.size()), [&](int64_t ti) {
    const auto [ji, r0] = tasks[size_t(ti)];
    const MatmulJob& jb = jobs[ji];
    const model::Mat& w = *jb.w;
    const uint64_t arb = act_row_bytes(w.type, w.cols, jb.cuda_order);
    const uint8_t* act = act_of(ji);
    const int64_t r1 = std::min(w.rows, r0 + chunk);
    const DotOrder order = dot_order(jb);
    if (w.type == GgmlType::Q4_0 && order.x8) {
      // Eight rows at a time (their sums in the lanes of one vector), over tiles of activation rows that stay in
      // the core's cache while the chunk's weight rows pass over them.
      constexpr int64_t kTile = 64;
      for (int64_t t0 = 0; t0 < jb.n_tok; t0 += kTile) {
        const int64_t t1 = std::min(jb.n_tok, t0 + kTile);
        for (int64_t r = r0; r < r1; r += 8) {
          const BlockQ4_0* w8[8];
          for (int i = 0; i < 8; ++i) w8[i] = reinterpret_cast<const BlockQ4_0*>(w.row(r + i));
          for (int64_t t = t0; t < t1; t += 8) {
            const int nt = int(std::min<int64_t>(8, t1 - t));
            const BlockQ8_0* a8[8];
            for (int i = 0; i < nt; ++i) a8[i] = reinterpret_cast<const BlockQ8_0*>(act + (t + i) * arb);
            float out[64];
            k.dot8_q4_0_q8_0_x8(w.cols, w8, a8, nt, out);
            for (int i = 0; i < nt; ++i) std::copy_n(out + 8 * i, 8, jb.y + (t + i) * w.rows + r);
          }
        }
      }
      return;
    }
    if (w.type == GgmlType::Q4_K && order.x8) {
      // Eight rows at a time against tiles of activation rows (one in decode), each token in its order (batched
      // below order.grouped, one-row after).
      constexpr int64_t kTile = kQ4KTileTokens;
      for (int64_t t0 = 0; t0 < jb.n_tok; t0 += kTile) {
        const int nt = int(std::min<int64_t>(kTile, jb.n_tok - t0));
        const int grouped = int(std::clamp<int64_t>(order.grouped - t0, 0, nt));
        const BlockQ8_K* an[kTile];
        for (int i = 0; i < nt; ++i) an[i] = reinterpret_cast<const BlockQ8_K*>(act + (t0 + i) * arb);
        for (int64_t r = r0; r < r1; r += 8) {
          const BlockQ4_K* w8[8];
          for (int i = 0; i < 8; ++i) w8[i] = reinterpret_cast<const BlockQ4_K*>(w.row(r + i));
          float out[8 * kTile];
          k.dot8_q4_k_q8_k_x8(w.cols, w8, an, nt, grouped, out);
          for (int i = 0; i < nt; ++i) std::copy_n(out + 8 * i, 8, jb.y + (t0 + i) * w.rows + r);
        }
      }
      return;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = w.row(r);
      int64_t t = 0;
      // Four activation rows against one unpacked weight row (equal to four dot_row calls).
      if (w.type == GgmlType::Q4_0 || w.type == GgmlType::Q8_0)
        for (; t + 4 <= jb.n_tok; t += 4) {
          const BlockQ8_0* a4[4];
          for (int i = 0; i < 4; ++i) a4[i] = reinterpret_cast<const BlockQ8_0*>(act + (t + i) * arb);
          float out[4];
          if (w.type == GgmlType::Q8_0) {
            k.dot4_q8_0_q8_0(w.cols, reinterpret_cast<const BlockQ8_0*>(wr), a4, out);
          } else {
            k.dot4_q4_0_q8_0(w.cols, reinterpret_cast<const BlockQ4_0*>(wr), a4, out);
          }
          for (int i = 0; i < 4; ++i) jb.y[(t + i) * w.rows + r] = out[i];
        }
      // Q2_K, Q3_K, Q5_K, Q6_K and IQ4_XS rows (Q2_K, Q3_K_M, Q5_K_M and IQ4_XS models' matrices; a Q4_K_M
      // model's attn_v, ffn_down and head): up to eight tokens against one unpacked row (equal to dot_row calls).
      const bool q2_k = w.type == GgmlType::Q2_K, q3_k = w.type == GgmlType::Q3_K, q5_k = w.type == GgmlType::Q5_K,
                 q6_k = w.type == GgmlType::Q6_K, iq4_xs = w.type == GgmlType::IQ4_XS;
      if ((q2_k || q3_k || q5_k || q6_k || iq4_xs) && !order.cuda)
        while (jb.n_tok - t >= 2) {
          const int nt = int(std::min<int64_t>(8, jb.n_tok - t));
          const BlockQ8_K* a8[8];
          for (int i = 0; i < nt; ++i) a8[i] = reinterpret_cast<const BlockQ8_K*>(act + (t + i) * arb);
          float out[8];
          if (q2_k) {
            k.dotn_q2_k_q8_k(w.cols, reinterpret_cast<const BlockQ2_K*>(wr), a8, nt, out);
          } else if (q3_k) {
            k.dotn_q3_k_q8_k(w.cols, reinterpret_cast<const BlockQ3_K*>(wr), a8, nt, out);
          } else if (q5_k) {
            k.dotn_q5_k_q8_k(w.cols, reinterpret_cast<const BlockQ5_K*>(wr), a8, nt, out);
          } else if (iq4_xs) {
            k.dotn_iq4_xs_q8_k(w.cols, reinterpret_cast<const BlockIQ4_XS*>(wr), a8, nt, out);
          } else {
            k.dotn_q6_k_q8_k(w.cols, reinterpret_cast<const BlockQ6_K*>(wr), a8, nt, out);
          }
          for (int i = 0; i < nt; ++i) jb.y[(t + i) * w.rows + r] = out[i];
          t += nt;
        }
      for (; t < jb.n_tok; ++t) jb.y[t * w.rows + r] = dot_row(k, w.type, order, w.cols, wr, act + t * arb);
    }
  }, beside);
}

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
  const float mean = float(sum / double(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (!weight) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * weight[i];
}

void rope_angles(int n_rot, int64_t pos, float base, const float* freq_factors, RopeAngles& out) {
  // cos/sin per pair, the angle advanced by repeated multiplication as ggml's rope cache does.
  DF_CHECK(n_rot / 2 <= kMaxRopePairs);
  const float theta_scale = std::pow(base, -2.0f / float(n_rot));
  float theta = float(pos);
  for (int i = 0; i < n_rot / 2; ++i) {
    const float t = freq_factors ? theta / freq_factors[i] : theta;
    out.cs[i] = std::cos(t);
    out.sn[i] = std::sin(t);
    theta *= theta_scale;
  }
}

void rope_rotate(float* x, int n_heads, int head_dim, int n_rot, model::RopeStyle style, const RopeAngles& a) {
  best_kernels().rope_rotate(n_heads, head_dim, n_rot, style == model::RopeStyle::kNeox, a.cs, a.sn, x);
}

void rope(float* x, int n_heads, int head_dim, int n_rot, int64_t pos, float base, model::RopeStyle style,
          const float* freq_factors) {
  RopeAngles a;
  rope_angles(n_rot, pos, base, freq_factors, a);
  rope_rotate(x, n_heads, head_dim, n_rot, style, a);
}

void get_row(const model::Mat& w, int64_t row, float* out) { dequantize_row(w.type, w.row(row), w.cols, out); }

Status gather_rows(const model::Mat& table, cache::RecordTier* rows, std::span<const int32_t> ids, float* out) {
  const int64_t n = int64_t(ids.size()), C = table.cols;
  if (!rows) {
    for (int64_t t = 0; t < n; ++t) get_row(table, ids[t], out + t * C);
    return {};
  }
  std::vector<int32_t> distinct(ids.begin(), ids.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const size_t step = std::max<size_t>(1, rows->max_acquire());
  for (size_t i0 = 0; i0 < distinct.size(); i0 += step) {
    std::span<const int32_t> part(distinct.data() + i0, std::min(step, distinct.size() - i0));
    DF_ASSIGN(cache::Pins pins, rows->acquire(0, part));
    for (int64_t t = 0; t < n; ++t) {
      const auto it = std::lower_bound(part.begin(), part.end(), ids[t]);
      if (it == part.end() || *it != ids[t]) continue;
      get_row(table.at(pins.data(size_t(it - part.begin()))), 0, out + t * C);
    }
  }
  return {};
}

void swiglu(const float* gate, const float* up, int64_t n, float* y) { best_kernels().swiglu(n, gate, up, y); }

void add(Context& ctx, const float* a, const float* b, int64_t n, float* y) {
  ctx.for_ranges(n, 16, kElementGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = a[i] + b[i];
  });
}

void swiglu(Context& ctx, const float* gate, const float* up, int64_t n, float* y) {
  // Bounds at multiples of 8, so that only the whole batch's last elements take the kernel's scalar tail.
  ctx.for_ranges(n, 8, kElementGrain,
                 [&](int64_t i0, int64_t i1) { ctx.kernels->swiglu(i1 - i0, gate + i0, up + i0, y + i0); });
}

void softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  // As ggml's SIMD softmax: 8-element steps with its exponential, each step summed in float, the steps and the
  // tail (libm's expf) in double; then one multiply by the rounded reciprocal.
  double sum = 0.0;
  const int64_t whole = n / 8 * 8;
  best_kernels().exp_shifted(whole, x, mx, x);
  for (int64_t i = 0; i < whole; i += 8) sum += double(lanes8_sum(x + i));
  for (int64_t i = whole; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += double(x[i]);
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

namespace {

// The keys a query at position `last` sees: 0 .. last, or the window's last `window` of them.
int64_t first_key(const AttentionArgs& a, int64_t last) {
  return a.window > 0 ? std::max<int64_t>(0, last - a.window + 1) : 0;
}

// Online softmax over keys [j0, j1) for query (t, h) in the order of ggml's one-query kernel: q rounded to f16,
// scores by Kernels::dot_f16_single, the value accumulator in f16. m and s_sum carry the running maximum and sum.
void attend_f16(const Kernels& k, const AttentionArgs& a, const uint16_t* q16, int g, int64_t j0, int64_t j1,
                uint16_t* acc16, float& m, float& s_sum) {
  const int64_t kv_k = int64_t(a.n_head_kv) * a.head_dim_k, kv_v = int64_t(a.n_head_kv) * a.head_dim_v;
  float scores[8];  // the next keys' dot products, computed side by side (they do not depend on the running state)
  for (int64_t j = j0; j < j1; ++j) {
    if ((j - j0) % 8 == 0)
      k.dot_f16_single_keys(int(std::min<int64_t>(8, j1 - j)), a.head_dim_k,
                            a.k + j * kv_k + int64_t(g) * a.head_dim_k, kv_k, q16, scores);
    const float s = scores[(j - j0) % 8] * a.scale;
    float ms = 1.0f, vs = 1.0f;
    if (s > m) {
      const float m_old = m;
      m = s;
      ms = std::exp(m_old - m);
      k.scale_f16(a.head_dim_v, acc16, ms);
    } else {
      vs = std::exp(s - m);
    }
    k.mad_f16(a.head_dim_v, acc16, a.v + j * kv_v + int64_t(g) * a.head_dim_v, vs);
    s_sum = std::fma(s_sum, ms, vs);  // fused, as llama.cpp's build computes S * ms + vs
  }
}

// One query row as ggml's tiled kernel computes it (batches of kTiledRows queries or more): keys in tiles of
// kKeyTile cells from cell 0; in each tile the scores are f32 dot products of the f32 query with the keys (one fused
// multiply-add per dimension, in order), scaled; the tile's maximum rescales the f32 accumulator and the sum
// (libm's expf); the tile's exponentials (exp_approx, masked keys 0) are summed 8 at a time in float, the 8 sums in
// double, added to the float sum; the values join the accumulator one fused multiply-add per key, in order.
void attend_tiled(const Kernels& k, const AttentionArgs& a, int64_t t, int h, float* out) {
  constexpr int64_t kKeyTile = 64;
  const int g = h / (a.n_head / a.n_head_kv);
  const int64_t kv_k = int64_t(a.n_head_kv) * a.head_dim_k, kv_v = int64_t(a.n_head_kv) * a.head_dim_v;
  const float* q = a.q + (t * a.n_head + h) * a.head_dim_k;
  const int64_t last = a.pos0 + t, first = first_key(a, last);
  float acc[1024], p[kKeyTile];
  std::fill_n(acc, a.head_dim_v, 0.0f);
  float m = -INFINITY, s_sum = 0.0f;
  for (int64_t c0 = first / kKeyTile * kKeyTile; c0 <= last; c0 += kKeyTile) {
    const int64_t j0 = std::max(c0, first), j1 = std::min(c0 + kKeyTile, last + 1);
    float tile_max = -INFINITY;
    std::fill_n(p, kKeyTile, -INFINITY);
    k.tile_scores_f16(j1 - j0, a.head_dim_k, a.k + j0 * kv_k + int64_t(g) * a.head_dim_k, kv_k, q, p + (j0 - c0));
    for (int64_t j = j0; j < j1; ++j) {
      p[j - c0] *= a.scale;
      tile_max = std::max(tile_max, p[j - c0]);
    }
    const float m_new = std::max(m, tile_max);
    if (m_new > m) {
      const float ms = std::exp(m - m_new);
      for (int d = 0; d < a.head_dim_v; ++d) acc[d] *= ms;
      s_sum *= ms;
    }
    m = m_new;
    double sum = 0.0;
    k.exp_shifted(kKeyTile, p, m, p);
    for (int64_t i = 0; i < kKeyTile; i += 8) sum += double(lanes8_sum(p + i));
    s_sum = float(double(s_sum) + sum);
    k.tile_accumulate_f16(j1 - j0, a.head_dim_v, a.v + j0 * kv_v + int64_t(g) * a.head_dim_v, kv_v, p + (j0 - c0), acc);
  }
  const float inv = s_sum == 0.0f ? 0.0f : 1.0f / s_sum;
  for (int d = 0; d < a.head_dim_v; ++d) out[d] = acc[d] * inv;
}

}  // namespace

int64_t kv_view_cells(int64_t n_used) { return std::max<int64_t>(256, (n_used + 255) / 256 * 256); }

void attention(Context& ctx, const AttentionArgs& a) {
  const Kernels& k = *ctx.kernels;
  DF_CHECK(a.head_dim_k <= 1024 && a.head_dim_v <= 1024);
  const int group = a.n_head / a.n_head_kv;
  if (a.n_tok >= kTiledRows && a.head_dim_v % 8 == 0) {
    ctx.parallel(a.n_tok * a.n_head, [&](int64_t task) {
      const int64_t t = task / a.n_head;
      const int h = int(task % a.n_head);
      attend_tiled(k, a, t, h, a.out + (t * a.n_head + h) * a.head_dim_v);
    });
    return;
  }
  // One query over a view of 512 cells or more: ggml splits the cells into one chunk per thread, attends each
  // chunk from scratch and merges the chunks' (maximum, sum, accumulator) in order.
  const int64_t cells = kv_view_cells(a.pos0 + a.n_tok);
  const int64_t n_split = a.n_tok == 1 && cells >= 512 ? int64_t(ctx.pool ? ctx.pool->size() : 1) : 1;
  if (n_split > 1) {
    const int64_t chunk = (cells + n_split - 1) / n_split, dv = a.head_dim_v;
    float* part = ctx.attn_parts.grow(uint64_t(a.n_head * n_split * (2 + dv)));
    ctx.parallel(a.n_head * n_split, [&](int64_t task) {
      const int h = int(task / n_split);
      const int64_t c = task % n_split, last = a.pos0, first = first_key(a, last);
      float* pt = part + task * (2 + dv);
      uint16_t q16[1024], acc16[1024];
      k.to_f16(a.q + h * a.head_dim_k, q16, a.head_dim_k);
      std::fill_n(acc16, dv, uint16_t{0});
      float m = -INFINITY, s_sum = 0.0f;
      attend_f16(k, a, q16, h / group, std::max(first, c * chunk), std::min(last + 1, (c + 1) * chunk), acc16, m,
                 s_sum);
      pt[0] = m;
      pt[1] = s_sum;
      for (int64_t d = 0; d < dv; ++d) pt[2 + d] = f16_to_f32(acc16[d]);
    });
    // The heads merge side by side, each over its chunks in order: on the calling thread alone, the merge of 16
    // chunks of 32 heads took about as long as attending them.
    ctx.for_rows(a.n_head, 1, [&](int64_t h) {
      float m = -INFINITY, s_sum = 0.0f;
      float* out = a.out + h * dv;
      std::fill_n(out, dv, 0.0f);
      for (int64_t c = 0; c < n_split; ++c) {
        const float* pt = part + (h * n_split + c) * (2 + dv);
        if (c * chunk >= cells || pt[1] == 0.0f) continue;
        const float m_new = std::max(m, pt[0]);
        const float s_old = std::exp(m - m_new), s_new = std::exp(pt[0] - m_new);
        k.merge_f32(dv, out, s_old, pt + 2, s_new);
        s_sum = std::fma(s_sum, s_old, pt[1] * s_new);
        m = m_new;
      }
      if (s_sum != 0.0f) {
        const float inv = 1.0f / s_sum;
        for (int64_t d = 0; d < dv; ++d) out[d] *= inv;
      }
    });
    return;
  }
  ctx.parallel(a.n_tok * a.n_head, [&](int64_t task) {
    const int64_t t = task / a.n_head;
    const int h = int(task % a.n_head);
    uint16_t q16[1024], acc16[1024];
    k.to_f16(a.q + (t * a.n_head + h) * a.head_dim_k, q16, a.head_dim_k);
    std::fill_n(acc16, a.head_dim_v, uint16_t{0});
    float m = -INFINITY, s_sum = 0.0f;
    const int64_t last = a.pos0 + t;  // causal: keys 0..last; ggml skips masked keys before any update
    attend_f16(k, a, q16, h / group, first_key(a, last), last + 1, acc16, m, s_sum);
    float* out = a.out + (t * a.n_head + h) * a.head_dim_v;
    const float inv = s_sum == 0.0f ? 0.0f : 1.0f / s_sum;
    for (int i = 0; i < a.head_dim_v; ++i) out[i] = f16_to_f32(acc16[i]) * inv;
  });
}

}  // namespace df::cpu
