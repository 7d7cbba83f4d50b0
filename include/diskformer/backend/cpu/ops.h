// Named operations of the forward pass on the CPU: each converts activations the way llama.cpp's CPU backend does
// (Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL weights, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants and IQ4_XS, f16 for f16
// weights, bf16 for bf16 weights) and splits the work over the pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "diskformer/backend/cpu/kernels.h"
#include "diskformer/backend/cpu/thread_pool.h"
#include "diskformer/cache/tier.h"
#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/util/result.h"

namespace df::cpu {

// Grows a reused buffer to at least n elements (never shrinks: the forwards' buffers keep their largest batch's size).
template <typename T>
void ensure_size(std::vector<T>& v, uint64_t n) {
  if (v.size() < n) v.resize(n);
}

// A reused work buffer whose contents are written before they are read: it grows without zeroing or copying, so
// that its fresh pages are first touched by the tasks that write them, on every thread, not zeroed on the owner's
// thread before the job starts (tens of MB for a prefill batch's routed rows).
template <typename T>
class WorkBuffer {
 public:
  // At least n elements; after a growth their values are unspecified.
  T* grow(uint64_t n) {
    if (n > size_) {
      data_.reset(new T[n]);
      size_ = n;
    }
    return data_.get();
  }
  T* data() const { return data_.get(); }

 private:
  std::unique_ptr<T[]> data_;
  uint64_t size_ = 0;
};

struct Context {
  const Kernels* kernels = &best_kernels();
  ThreadPool* pool = nullptr;    // nullptr: run on the calling thread
  WorkBuffer<uint8_t> act;       // converted activations of the current matmul
  WorkBuffer<float> attn_parts;  // [n_head][chunks][2 + head_dim_v]: one query's attention of each chunk of cells
  uint64_t weight_bytes_read = 0;  // bytes of weights the matmuls streamed through (for bench's GB/s)

  // fn(task) for every task < n_tasks; beside, where given, once on this thread meanwhile (ThreadPool::run).
  void parallel(int64_t n_tasks, const std::function<void(int64_t)>& fn, const std::function<void()>& beside = {});
  // fn(i0, i1) over [0, n) in one range per thread, the bounds multiples of `align`, each range at least `grain`
  // long: fewer elements stay on this thread rather than wake the pool. For the row-wise and element-wise steps
  // between the products, which would otherwise leave every other thread waiting; each element is computed as on
  // one thread. Not from inside a task of the pool.
  void for_ranges(int64_t n, int64_t align, int64_t grain, const std::function<void(int64_t i0, int64_t i1)>& fn);
  // fn(row) for every row < n, as for_ranges with ranges of at least `grain` rows.
  void for_rows(int64_t n, int64_t grain, const std::function<void(int64_t row)>& fn);
};

// Rows a task of Context::for_rows takes at least: a norm, RoPE or routing of one token is a few microseconds,
// about what starting a job of the pool costs.
constexpr int64_t kRowGrain = 4;
// Elements a task of an element-wise step (a residual add, an activation) takes at least.
constexpr int64_t kElementGrain = 16384;

// y[t][r] = dot(W row r, x[t]) for t < n_tok: x is [n_tok][w.cols], y is [n_tok][w.rows].
void matmul(Context& ctx, const model::Mat& w, const float* x, int64_t n_tok, float* y);

// Several independent products run as one parallel job (q, k and v of a layer; the experts of a layer), so that
// small matrices do not each pay for waking the pool. Results equal separate matmul() calls.
struct MatmulJob {
  const model::Mat* w = nullptr;
  const float* x = nullptr;  // [n_tok][w->cols]
  int64_t n_tok = 0;
  float* y = nullptr;        // [n_tok][w->rows]
  // Each activation row multiplied on its own, in llama.cpp's one-row orders whatever n_tok is: its mul_mat_id
  // (routed experts) takes the tokens of an expert one at a time.
  bool per_row = false;
  // The 256-element types take Q8_0 activations and the CUDA backend's decode order (Kernels::dot_q4_k_q8_0 and
  // its kin) instead of llama.cpp's Q8_K: a GPU run's CPU share of its experts then rounds as the GPU would.
  bool cuda_order = false;
};
// beside, where given, runs once on the calling thread while the pool's other threads start the products.
void matmul_many(Context& ctx, std::span<const MatmulJob> jobs, const std::function<void()>& beside = {});

// Whether the CPU's product of a matrix of type t rounds as the CUDA decode products do, with cuda_order where
// that matters: the same Q8_0 activations and per-block terms, at most the sum's order differing.
bool rounds_as_cuda_decode(gguf::GgmlType t);

// y = x / sqrt(mean(x^2) + eps) * weight, n elements (ggml's rms_norm then mul; the square sum in double); without
// the multiply where weight is nullptr.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y);

// Rotates the first n_rot dimensions of each of n_heads heads of head_dim floats at position pos. freq_factors
// ([n_rot / 2], or nullptr) divide each pair's angle (ggml's rope with frequency factors).
void rope(float* x, int n_heads, int head_dim, int n_rot, int64_t pos, float base, model::RopeStyle style,
          const float* freq_factors = nullptr);

// rope in two steps, so that the heads of q and k at one position share the angles: the cosines and sines of the
// n_rot / 2 (<= kMaxRopePairs) pairs at pos, then the rotation by them.
constexpr int kMaxRopePairs = 1024;
struct RopeAngles {
  float cs[kMaxRopePairs], sn[kMaxRopePairs];
};
void rope_angles(int n_rot, int64_t pos, float base, const float* freq_factors, RopeAngles& out);
void rope_rotate(float* x, int n_heads, int head_dim, int n_rot, model::RopeStyle style, const RopeAngles& a);

// Row `row` of an embedding table, dequantized to floats ([w.cols]).
void get_row(const model::Mat& w, int64_t row, float* out);
// out[t] ([table.cols] floats each) = row ids[t] of a per-token table: from `table` where it is resident (rows
// nullptr), else through `rows`, its row tier (record (0, id); table keeps the shape and type): each distinct id's
// row once, as many at a time as the tier pins. Errors: a failed read of a row.
Status gather_rows(const model::Mat& table, cache::RecordTier* rows, std::span<const int32_t> ids, float* out);

// y[i] = a[i] + b[i] for i < n, over the pool (a residual connection; y may be a or b).
void add(Context& ctx, const float* a, const float* b, int64_t n, float* y);

// y[i] = silu(gate[i]) * up[i], n a whole number of rows whose length is a multiple of 8 (Kernels::swiglu).
void swiglu(const float* gate, const float* up, int64_t n, float* y);
// The same over the pool, in ranges of whole vectors: each element as above.
void swiglu(Context& ctx, const float* gate, const float* up, int64_t n, float* y);

// GELU as llama.cpp's CPU backend computes it (its tanh form looked up in a table of f16 inputs; x <= -10 gives 0,
// x >= 10 gives x): y[i] = gelu(x[i]), and y[i] = gelu(gate[i]) * up[i] (GEGLU). gelu.cpp.
void gelu(const float* x, int64_t n, float* y);
void geglu(const float* gate, const float* up, int64_t n, float* y);
void geglu(Context& ctx, const float* gate, const float* up, int64_t n, float* y);

// In-place softmax over n values, as ggml's soft_max computes it (its vector exponential, sums in double).
void softmax(float* x, int64_t n);

// Causal attention of n_tok queries at positions pos0 .. pos0 + n_tok - 1 over an f16 cache holding positions
// 0 .. pos0 + n_tok - 1, in the orders of ggml's CPU flash attention, which has three:
//   - fewer than kTiledRows queries: one query row at a time, q rounded to f16, scores in f32
//     (Kernels::dot_f16_single), online softmax with the value accumulator kept in f16;
//   - kTiledRows queries or more: its tiled kernel, f32 throughout (ops.cpp, attend_tiled);
//   - one query over a view of 512 cells or more (llama.cpp pads the view, kv_view_cells): the cells split into one
//     chunk per thread of the pool, each attended as the first order from scratch, the chunks merged in order; so
//     these results depend on the thread count, as llama.cpp's do on its -t.
// The cells hold positions in order: a sliding window masks the keys before it (llama.cpp's own cache for sliding
// layers holds them in a ring of at least window + 512 cells, whose order past its end is not reproduced here).
struct AttentionArgs {
  const float* q = nullptr;         // [n_tok][n_head * head_dim_k]
  const uint16_t* k = nullptr;      // [positions][n_head_kv * head_dim_k] f16
  const uint16_t* v = nullptr;      // [positions][n_head_kv * head_dim_v] f16
  float* out = nullptr;             // [n_tok][n_head * head_dim_v]
  int n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0;
  int64_t pos0 = 0, n_tok = 0;
  float scale = 1.0f;
  int64_t window = 0;  // > 0: the query at position p sees keys p - window + 1 .. p only (a sliding layer)
};
constexpr int64_t kTiledRows = 64;
// The cells llama.cpp's KV cache shows attention when n_used of them are in use: a multiple of 256, at least 256.
int64_t kv_view_cells(int64_t n_used);
void attention(Context& ctx, const AttentionArgs& a);

}  // namespace df::cpu
