// Causal attention over an f16 KV cache with GQA: cpu::attention's operation (q rounded to f16, f32 scores, softmax
// over positions 0 .. pos[t]), but with the online softmax and the value sums in f32 where the CPU code (like ggml's)
// rounds its value accumulator to f16 after every position. tests/gpu/attention_test.cpp states the tolerances
// against the CPU reference and against an exact evaluation in double.
//
// Three kernels:
// - split (flash decoding, CUDA cores): a block per (token, KV head, part of the positions) serves up to 16 query
//   heads of the KV head's group from one read of the keys and values, in tiles of 32 positions (a lane per
//   position while scoring). Decode and small batches cut the positions into parts so that every SM has blocks;
//   each part leaves (max, sum, unnormalized output) in the workspace and merge_kernel combines them. The part
//   count is fixed at launch from n_ctx (a captured decode graph replays with new positions); each block finds its
//   own range from pos[t] on the device, and parts past the sequence exit at once. With one part the block writes
//   the output itself (batches too large for the workspace at head dims the tensor-core kernel does not take). A
//   sliding window starts the range at pos[t] - window + 1. Built for heads of up to 128, 256 and 512 (gemma4's
//   full layers, whose tiles take dynamic shared memory past the default 48 KiB). Tiles reach shared memory by
//   asynchronous copies; the first tile's rows from earlier passes are fetched before the kernel before has
//   finished.
// - warp split: the split kernel's grid and parts for the common shapes (equal head dims of 64 or 128, groups of up
//   to 8 heads), with each warp scoring and summing its own positions from registers and the block meeting once at
//   the end; merge_kernel combines its parts the same way.
// - mma (prefill, flash-attention 2 style): a block per 64 rows (token, query head of one GQA group), so the keys and
//   values staged in shared memory serve every head of the group; Q·Kᵀ and P·V on tensor cores (mma.sync m16n8k16,
//   f16 inputs, f32 accumulation) with the probabilities rounded to f16 for P·V. Tiles past the block's last position
//   are never visited; only the tiles that reach past its first row's position are masked element by element. It
//   masks causally only: a window that masks anything takes the split kernel.
#include <algorithm>
#include <climits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rms.cuh"
#include "diskformer/cudart/check.h"
#include "diskformer/backend/cuda/kernels.h"
#include "diskformer/util/check.h"

namespace df::cuda {

namespace {

constexpr int kMaxHead = 512;
constexpr int kThreads = 128;       // both kernels: 4 warps
constexpr int kTile = 32;           // split: positions per round, one per lane
constexpr int kHeadsPerBlock = 16;  // split: query heads a block serves (larger groups take several blocks)
constexpr int kMinPart = kAttentionMinPart;   // split: positions per part at least, so short contexts use few parts
constexpr int kMaxSlots = kAttentionMaxSlots;  // split: n_tok * parts per head at most (bounds the workspace)
constexpr int kSplitMaxTok = 16;    // batches up to this size take the split kernel even where mma applies
constexpr int kRows = 64;           // mma: (token, head) rows per block, 16 per warp

// Parts a sequence of len positions is cut into: a part holds at least kMinPart positions (except when len is
// shorter), at most n_split parts. The split kernel and the merge agree through this function.
__device__ __forceinline__ int parts_of(int64_t len, int n_split) {
  return int(min(int64_t(n_split), (len + kMinPart - 1) / kMinPart));
}

__device__ __forceinline__ float2 h2_to_f2(uint32_t u) {
  return make_float2(dev::f16_to_f32(uint16_t(u & 0xffffu)), dev::f16_to_f32(uint16_t(u >> 16)));
}

__device__ __forceinline__ float dot8(uint4 a, uint4 b, float s) {
  const float2 a0 = h2_to_f2(a.x), a1 = h2_to_f2(a.y), a2 = h2_to_f2(a.z), a3 = h2_to_f2(a.w);
  const float2 b0 = h2_to_f2(b.x), b1 = h2_to_f2(b.y), b2 = h2_to_f2(b.z), b3 = h2_to_f2(b.w);
  s = fmaf(a0.x, b0.x, s), s = fmaf(a0.y, b0.y, s), s = fmaf(a1.x, b1.x, s), s = fmaf(a1.y, b1.y, s);
  s = fmaf(a2.x, b2.x, s), s = fmaf(a2.y, b2.y, s), s = fmaf(a3.x, b3.x, s), s = fmaf(a3.y, b3.y, s);
  return s;
}

// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80 and later), and the
// wait for all of this thread's such copies.
__device__ __forceinline__ void copy16_async(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(uint32_t(__cvta_generic_to_shared(dst))), "l"(src)
               : "memory");
}
__device__ __forceinline__ void copies_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }

struct SplitParams {
  const float* q;
  const uint16_t* k;
  const uint16_t* v;
  float* out;
  float* work;  // [n_tok * n_head * n_split][hv + 2]: unnormalized output, then max and sum; unused when n_split 1
  const int32_t* pos;
  int n_head, n_head_kv, hk, hv;
  int n_split, n_hsub;  // parts per sequence (launch-time maximum); blocks per group (ceil(group / 16))
  float scale;
  int64_t window;       // > 0: the last `window` positions only
};

// The first position token t's query sees (its own position is `last`).
__device__ __forceinline__ int64_t first_key(int64_t last, int64_t window) {
  return window > 0 ? max(int64_t(0), last - window + 1) : 0;
}

// Positions [begin, end) of part c of a sequence whose last position is `last`; false where the sequence has fewer
// parts than c + 1. The cut is balanced: every part non-empty because parts <= len.
__device__ __forceinline__ bool part_range(const SplitParams& p, int c, int32_t last, int64_t& begin, int64_t& end) {
  if (last < 0) __trap();  // a position the caller never set
  const int64_t first = first_key(last, p.window), len = int64_t(last) + 1 - first;
  const int parts = parts_of(len, p.n_split);
  if (c >= parts) return false;
  begin = first + len * c / parts, end = first + len * (c + 1) / parts;
  return true;
}

// The positions below which a launch's cache rows were stored by earlier passes: those below every position of its
// tokens (this pass stores exactly its own tokens' positions); last is one of them.
__device__ __forceinline__ int64_t stored_before(const int32_t* pos, unsigned n_tok, int32_t last) {
  int64_t stored = last;
  for (unsigned u = 0; u < n_tok; ++u) stored = min(stored, int64_t(pos[u]));
  return stored;
}

// The split kernel's shared memory for head dims up to MH: the block's queries (f16), then a tile of keys and one of
// values, rows padded by 16 bytes.
template <int MH>
constexpr size_t split_smem() {
  return size_t(kHeadsPerBlock * MH + 2 * kTile * (MH + 8)) * sizeof(uint16_t);
}

// grid (n_split, n_head_kv * n_hsub, n_tok), head dims up to MH. Thread tid owns value dims tid, tid + 128, ... of
// every head it serves; while scoring, warp w owns heads w, w + 4, w + 8, w + 12 and lane j position j of the tile.
template <int MH>
__global__ void __launch_bounds__(kThreads) split_kernel(const SplitParams p) {
  dev::allow_next();
  // Positions are the host's, copied in before the pass (never a kernel's output): read before wait_prior.
  const int c = blockIdx.x;
  const int g = blockIdx.y / p.n_hsub, hs = blockIdx.y % p.n_hsub;
  const int64_t t = blockIdx.z;
  const int group = p.n_head / p.n_head_kv;
  const int h0 = g * group + hs * kHeadsPerBlock;
  const int nh = min(kHeadsPerBlock, group - hs * kHeadsPerBlock);
  const int32_t last = p.pos[t];
  int64_t j_begin, j_end;
  if (!part_range(p, c, last, j_begin, j_end)) return;  // block-uniform, before any barrier

  const int hk = p.hk, hv = p.hv, ks = hk + 8, vs = hv + 8;  // row strides padded by 16 bytes: no bank conflicts
  extern __shared__ __align__(16) uint16_t split_sh[];
  uint16_t* q_sh = split_sh;                      // [kHeadsPerBlock][MH]
  uint16_t* k_sh = q_sh + kHeadsPerBlock * MH;    // [kTile][MH + 8]
  uint16_t* v_sh = k_sh + kTile * (MH + 8);       // [kTile][MH + 8]
  __shared__ __align__(16) float p_sh[kHeadsPerBlock][kTile];
  __shared__ float alpha_sh[kHeadsPerBlock], m_sh[kHeadsPerBlock], l_sh[kHeadsPerBlock];

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t kv_k = int64_t(p.n_head_kv) * hk, kv_v = int64_t(p.n_head_kv) * hv;
  const uint16_t* kb = p.k + int64_t(g) * hk;
  const uint16_t* vb = p.v + int64_t(g) * hv;
  const int k8 = hk / 8, v8 = hv / 8;
  // Rows [from, to) of the tile at j0 into k_sh / v_sh, as asynchronous copies (copies_wait() before the barrier
  // that publishes them). Rows from n_c up to kTile stay stale: their scores are masked and the value loop stops
  // at n_c.
  auto fetch = [&](int64_t j0, int from, int to) {
    for (int i = tid; i < (to - from) * k8; i += kThreads) {
      const int j = from + i / k8, c8 = i % k8;
      copy16_async(k_sh + j * ks + c8 * 8, kb + (j0 + j) * kv_k + c8 * 8);
    }
    for (int i = tid; i < (to - from) * v8; i += kThreads) {
      const int j = from + i / v8, c8 = i % v8;
      copy16_async(v_sh + j * vs + c8 * 8, vb + (j0 + j) * kv_v + c8 * 8);
    }
  };
  // The first tile's rows below every position of this launch's tokens were stored by earlier passes: they are
  // fetched while the kernel before finishes (a decode step's part often has one tile, and this hides its memory
  // round trip); rows from there on are this pass's (the kernel before stores them, or an earlier layer whose cache
  // this one reads) and come after wait_prior.
  const int64_t stored = stored_before(p.pos, gridDim.z, last);
  const int n_c0 = int(min(int64_t(kTile), j_end - j_begin));
  const int early = int(max(int64_t(0), min(int64_t(n_c0), stored - j_begin)));
  fetch(j_begin, 0, early);
  dev::wait_prior();
  fetch(j_begin, early, n_c0);
  // The block's heads are consecutive rows of q, 16-byte aligned (hk is a multiple of 8). A thread's quads are all
  // loaded before any is stored: one round trip to the L2, not one per quad (which took most of a decode step's
  // attention time).
  const float4* qrow = reinterpret_cast<const float4*>(p.q + (t * p.n_head + h0) * hk);
  constexpr int kQuads = kHeadsPerBlock * MH / 4 / kThreads;
  float4 qv[kQuads];
  const int n_quads = nh * hk / 4;
#pragma unroll
  for (int u = 0; u < kQuads; ++u)
    if (tid + u * kThreads < n_quads) qv[u] = qrow[tid + u * kThreads];
#pragma unroll
  for (int u = 0; u < kQuads; ++u) {
    const int i = tid + u * kThreads;
    if (i < n_quads) {
      uint2 h;
      h.x = uint32_t(dev::f32_to_f16(qv[u].x)) | (uint32_t(dev::f32_to_f16(qv[u].y)) << 16);
      h.y = uint32_t(dev::f32_to_f16(qv[u].z)) | (uint32_t(dev::f32_to_f16(qv[u].w)) << 16);
      *reinterpret_cast<uint2*>(q_sh + 4 * i) = h;
    }
  }

  constexpr int kWarpHeads = kHeadsPerBlock / 4;
  float m_r[kWarpHeads], l_r[kWarpHeads];
#pragma unroll
  for (int r = 0; r < kWarpHeads; ++r) m_r[r] = -INFINITY, l_r[r] = 0.0f;
  constexpr int kDims = MH / kThreads;  // value dims per thread
  float acc[kHeadsPerBlock][kDims];
#pragma unroll
  for (int hh = 0; hh < kHeadsPerBlock; ++hh)
#pragma unroll
    for (int d = 0; d < kDims; ++d) acc[hh][d] = 0.0f;

  for (int64_t j0 = j_begin; j0 < j_end; j0 += kTile) {
    const int n_c = int(min(int64_t(kTile), j_end - j0));
    if (j0 != j_begin) {
      __syncthreads();  // the previous tile's k_sh, v_sh, p_sh, alpha_sh consumed
      fetch(j0, 0, n_c);
    }
    copies_wait();
    __syncthreads();  // q_sh and the tile written

    float s[kWarpHeads];
#pragma unroll
    for (int r = 0; r < kWarpHeads; ++r) s[r] = 0.0f;
    const uint16_t* kr = k_sh + lane * ks;
    for (int d = 0; d < hk; d += 8) {
      const uint4 kv = *reinterpret_cast<const uint4*>(kr + d);
#pragma unroll
      for (int r = 0; r < kWarpHeads; ++r) {
        const int hh = warp + 4 * r;
        if (hh < nh) s[r] = dot8(kv, *reinterpret_cast<const uint4*>(q_sh + hh * hk + d), s[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kWarpHeads; ++r) {
      const int hh = warp + 4 * r;
      if (hh >= nh) continue;  // warp-uniform: the shuffles below see all 32 lanes
      const float sc = lane < n_c ? __fmul_rn(s[r], p.scale) : -INFINITY;
      const float m_new = fmaxf(m_r[r], dev::warp_max(sc));  // finite: lane 0 always holds a position
      const float alpha = expf(m_r[r] - m_new);              // 0 on the first tile (m_r = -inf)
      const float pr = expf(sc - m_new);                      // 0 on masked lanes
      l_r[r] = l_r[r] * alpha + dev::warp_sum(pr);
      m_r[r] = m_new;
      p_sh[hh][lane] = pr;
      if (lane == 0) alpha_sh[hh] = alpha;
    }
    __syncthreads();

#pragma unroll
    for (int hh = 0; hh < kHeadsPerBlock; ++hh)
      if (hh < nh)
#pragma unroll
        for (int d = 0; d < kDims; ++d) acc[hh][d] *= alpha_sh[hh];
    for (int j = 0; j < n_c; ++j) {
      const uint16_t* vr = v_sh + j * vs;
      float vv[kDims];
#pragma unroll
      for (int d = 0; d < kDims; ++d) vv[d] = tid + d * kThreads < hv ? dev::f16_to_f32(vr[tid + d * kThreads]) : 0.0f;
#pragma unroll
      for (int hh = 0; hh < kHeadsPerBlock; ++hh)
        if (hh < nh) {
          const float pj = p_sh[hh][j];
#pragma unroll
          for (int d = 0; d < kDims; ++d) acc[hh][d] = fmaf(pj, vv[d], acc[hh][d]);
        }
    }
  }

#pragma unroll
  for (int r = 0; r < kWarpHeads; ++r) {
    const int hh = warp + 4 * r;
    if (hh < nh && lane == 0) m_sh[hh] = m_r[r], l_sh[hh] = l_r[r];
  }
  __syncthreads();
#pragma unroll
  for (int hh = 0; hh < kHeadsPerBlock; ++hh) {
    if (hh >= nh) continue;
    const int64_t row = t * p.n_head + h0 + hh;
    if (p.n_split == 1) {
      const float inv = l_sh[hh] > 0.0f ? 1.0f / l_sh[hh] : 0.0f;
      float* o = p.out + row * hv;
#pragma unroll
      for (int d = 0; d < kDims; ++d)
        if (tid + d * kThreads < hv) o[tid + d * kThreads] = acc[hh][d] * inv;
    } else {
      float* w = p.work + (row * p.n_split + c) * (hv + 2);
#pragma unroll
      for (int d = 0; d < kDims; ++d)
        if (tid + d * kThreads < hv) w[tid + d * kThreads] = acc[hh][d];
      if (tid == 0) w[hv] = m_sh[hh], w[hv + 1] = l_sh[hh];
    }
  }
}

// N f16 values a lane loads in one access (N = 2 or 4), through the L2 only: rows of this pass become visible
// at wait_prior, and the L1 must not hold an older copy of their lines.
template <int N>
struct Halves {
  uint32_t u[N / 2];
};
template <int N>
__device__ __forceinline__ Halves<N> load_halves(const uint16_t* p) {
  Halves<N> h;
  if constexpr (N == 2) {
    h.u[0] = __ldcg(reinterpret_cast<const unsigned int*>(p));
  } else {
    static_assert(N == 4);
    const uint2 x = __ldcg(reinterpret_cast<const uint2*>(p));
    h.u[0] = x.x, h.u[1] = x.y;
  }
  return h;
}
template <int N>
__device__ __forceinline__ void widen(const Halves<N>& h, float (&f)[N]) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const float2 x = h2_to_f2(h.u[i]);
    f[2 * i] = x.x, f[2 * i + 1] = x.y;
  }
}

// 2N values a lane to N: lanes with bit N of their index set keep the upper half, the others the lower, each adding
// the partner lane's copy of its half. Five folds (N = 16 .. 1) take 32 values a lane to the sum over the warp of
// value `lane` in lane `lane`: 31 shuffles where 32 separate warp sums take 160.
template <int N>
__device__ __forceinline__ void fold_half(float* v, int lane) {
  const bool up = lane & N;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float send = up ? v[i] : v[i + N];
    const float keep = up ? v[i + N] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, N);
  }
}

// The decode form of the split kernel for GQA groups of up to NH (4 or 8) query heads and heads of D (64 or 128)
// dims on both sides: grid and parts as split_kernel's (n_hsub 1), but each warp takes its own positions, R = 32 / NH
// a round, and the block meets once, at the end. Lane l holds dims D/32 * l .. of every key, value and query row it
// uses, loaded from global memory straight into registers (the next round's while this one computes); a round's
// R * NH partial scores are folded so that lane l holds position l / NH, head l % NH; the softmax and the value sums
// are the warp's own, and the warps' (max, sum, output) are combined through shared memory as merge_kernel combines
// parts. Against split_kernel's shared tiles of 32 positions, which at a decode step's 16-position parts leave half
// the lanes idle and pass four barriers, this is one memory round trip after wait_prior and no barrier in the loop.
template <int D, int NH>
__global__ void __launch_bounds__(kThreads) warp_split_kernel(const SplitParams p) {
  dev::allow_next();
  constexpr int R = 32 / NH, E = D / 32, kWarps = kThreads / 32;
  // Positions are the host's, copied in before the pass (never a kernel's output): read before wait_prior.
  const int c = blockIdx.x, g = blockIdx.y;
  const int64_t t = blockIdx.z;
  const int group = p.n_head / p.n_head_kv;  // <= NH
  const int h0 = g * group;
  const int32_t last = p.pos[t];
  int64_t j_begin, j_end;
  if (!part_range(p, c, last, j_begin, j_end)) return;  // block-uniform, before the barrier

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t kv = int64_t(p.n_head_kv) * D;  // a cache row: every KV head's keys (or values)
  const uint16_t* kb = p.k + int64_t(g) * D + E * lane;
  const uint16_t* vb = p.v + int64_t(g) * D + E * lane;
  // Round i of warp w: positions j_begin + (i * kWarps + w) * R + r, r < R.
  constexpr int64_t kStep = int64_t(kWarps) * R;
  int64_t j0 = j_begin + int64_t(warp) * R;
  Halves<E> kr[R], vr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) kr[r] = vr[r] = Halves<E>{};
  // Rows below every position of this launch's tokens were stored by earlier passes: loaded while the kernel before
  // finishes; the rest (this pass's) after wait_prior.
  const int64_t stored = stored_before(p.pos, gridDim.z, last);
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (j0 + r < min(j_end, stored)) kr[r] = load_halves<E>(kb + (j0 + r) * kv), vr[r] = load_halves<E>(vb + (j0 + r) * kv);
  dev::wait_prior();
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (j0 + r >= stored && j0 + r < j_end)
      kr[r] = load_halves<E>(kb + (j0 + r) * kv), vr[r] = load_halves<E>(vb + (j0 + r) * kv);
  // The query rounded to f16, as cpu::attention rounds it; heads past the group score 0 and are never stored.
  float qf[NH][E];
#pragma unroll
  for (int h = 0; h < NH; ++h) {
    float x[E];
    if (h < group) {
      const float* qrow = p.q + (t * p.n_head + h0 + h) * D + E * lane;
#pragma unroll
      for (int e = 0; e < E; e += 2) {
        const float2 y = __ldcg(reinterpret_cast<const float2*>(qrow + e));
        x[e] = y.x, x[e + 1] = y.y;
      }
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) x[e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < E; ++e) qf[h][e] = dev::f16_to_f32(dev::f32_to_f16(x[e]));
  }

  // Lane l's head is l % NH: its running max and sum over this warp's positions.
  float m_h = -INFINITY, l_h = 0.0f;
  float acc[NH][E];
#pragma unroll
  for (int h = 0; h < NH; ++h)
#pragma unroll
    for (int e = 0; e < E; ++e) acc[h][e] = 0.0f;
  for (; j0 < j_end; j0 += kStep) {
    const int64_t j1 = j0 + kStep;
    Halves<E> kn[R], vn[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      kn[r] = vn[r] = Halves<E>{};
      if (j1 + r < j_end) kn[r] = load_halves<E>(kb + (j1 + r) * kv), vn[r] = load_halves<E>(vb + (j1 + r) * kv);
    }
    float v[32];  // v[r * NH + h]: this lane's share of position j0 + r's score for head h
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float kf[E];
      widen(kr[r], kf);
#pragma unroll
      for (int h = 0; h < NH; ++h) {
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) s = fmaf(kf[e], qf[h][e], s);
        v[r * NH + h] = s;
      }
    }
    fold_half<16>(v, lane);
    fold_half<8>(v, lane);
    fold_half<4>(v, lane);
    fold_half<2>(v, lane);
    fold_half<1>(v, lane);
    const float sc = j0 + lane / NH < j_end ? __fmul_rn(v[0], p.scale) : -INFINITY;
    float mx = sc;
#pragma unroll
    for (int o = NH; o < 32; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float m_new = fmaxf(m_h, mx);  // finite: position j0 is in the part
    const float alpha = expf(m_h - m_new);  // 0 on the first round (m_h = -inf)
    const float pr = expf(sc - m_new);      // 0 past the part
    float ps = pr;
#pragma unroll
    for (int o = NH; o < 32; o <<= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
    l_h = l_h * alpha + ps;
    m_h = m_new;
#pragma unroll
    for (int h = 0; h < NH; ++h) {
      const float a = __shfl_sync(0xffffffffu, alpha, h);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[h][e] *= a;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (j0 + r >= j_end) break;  // warp-uniform; the rows past the part were never loaded
      float vf[E];
      widen(vr[r], vf);
#pragma unroll
      for (int h = 0; h < NH; ++h) {
        const float pj = __shfl_sync(0xffffffffu, pr, r * NH + h);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[h][e] = fmaf(pj, vf[e], acc[h][e]);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) kr[r] = kn[r], vr[r] = vn[r];
  }

  // The warps' partials combined: a warp without positions has max -inf and weighs 0.
  __shared__ float wm_sh[kWarps][NH], wl_sh[kWarps][NH];
  __shared__ __align__(16) float wacc_sh[kWarps][NH][D];
  if (lane < NH) wm_sh[warp][lane] = m_h, wl_sh[warp][lane] = l_h;
#pragma unroll
  for (int h = 0; h < NH; ++h) {  // one vector store a head: no bank conflicts
    float* w = &wacc_sh[warp][h][E * lane];
    if constexpr (E == 4)
      *reinterpret_cast<float4*>(w) = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
    else
      *reinterpret_cast<float2*>(w) = make_float2(acc[h][0], acc[h][1]);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < group * D; i += kThreads) {
    const int hh = i / D, d = i % D;
    float mw = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mw = fmaxf(mw, wm_sh[w][hh]);
    float o = 0.0f, l = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float e = expf(wm_sh[w][hh] - mw);
      o = fmaf(wacc_sh[w][hh][d], e, o);
      l = fmaf(wl_sh[w][hh], e, l);
    }
    const int64_t row = t * p.n_head + h0 + hh;
    if (p.n_split == 1) {
      p.out[row * D + d] = o * (l > 0.0f ? 1.0f / l : 0.0f);
    } else {
      float* wk = p.work + (row * p.n_split + c) * (D + 2);
      wk[d] = o;
      if (d == 0) wk[D] = mw, wk[D + 1] = l;
    }
  }
}

// grid (n_head, n_tok): out = sum over parts of acc_c * e^(m_c - M) / sum of l_c * e^(m_c - M), M the largest m_c.
__global__ void __launch_bounds__(kThreads) merge_kernel(const float* __restrict__ work, float* __restrict__ out,
                                                         const int32_t* __restrict__ pos, int n_head, int hv,
                                                         int n_split, int64_t window, uint8_t* __restrict__ out_q8) {
  dev::allow_next();
  dev::wait_prior();
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y, row = t * n_head + h;
  // >= 1 (the split kernel trapped on pos < 0), as the split kernel cut the positions.
  const int parts = parts_of(int64_t(pos[t]) + 1 - first_key(pos[t], window), n_split);
  const float* w = work + row * n_split * (hv + 2);
  __shared__ float wt[kMaxSlots];
  float m = -INFINITY;
  for (int c = 0; c < parts; ++c) m = fmaxf(m, w[c * (hv + 2) + hv]);
  if (threadIdx.x < parts) wt[threadIdx.x] = expf(w[threadIdx.x * (hv + 2) + hv] - m);
  __syncthreads();
  float l = 0.0f;
  for (int c = 0; c < parts; ++c) l = fmaf(w[c * (hv + 2) + hv + 1], wt[c], l);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  // With out_q8, hv is a multiple of 32: each warp's 32 dims of a round are one Q8_0 block (the whole warp).
  for (int d = threadIdx.x; d < hv; d += kThreads) {
    float o = 0.0f;
    for (int c = 0; c < parts; ++c) o = fmaf(w[c * (hv + 2) + d], wt[c], o);
    const float v = o * inv;
    out[row * hv + d] = v;
    if (out_q8 != nullptr)
      dev::quantize_block_q8_0(v, out_q8 + (row * hv + d) / dev::kQK * dev::kQ8Bytes, int(threadIdx.x % 32));
  }
}

// ---- tensor cores ----

__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  return uint32_t(dev::f32_to_f16(lo)) | (uint32_t(dev::f32_to_f16(hi)) << 16);
}

// c += a (16x16, row-major fragment) * b (16x8, column fragment): the register layouts of PTX's mma.m16n8k16 with
// gid = lane / 4, tig = lane % 4: a[0] row gid cols 2tig..+1, a[1] row gid+8, a[2] row gid cols 8+2tig..+1,
// a[3] row gid+8 cols 8+2tig..+1; b[0] rows (k) 2tig..+1 col (n) gid, b[1] rows 8+2tig..+1; c[0..1] row gid cols
// 2tig..+1, c[2..3] row gid+8.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four transposed 8x8 f16 matrices from shared memory; lanes 8i .. 8i+7 give the 16-byte row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* p) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

struct MmaParams {
  const float* q;
  const uint16_t* k;
  const uint16_t* v;
  float* out;
  const int32_t* pos;
  int64_t n_tok;
  int n_head, n_head_kv;
  float scale_log2;  // scale * log2(e): the softmax runs in base 2
};

// grid (ceil(n_tok * group / 64), n_head_kv). Row r of block b is R = 64 b + r over the (token, head in group)
// pairs of KV head g: token R / group, query head g * group + R % group. Warp w owns rows 16w .. 16w + 15.
template <int HK, int HV, int BC>
__global__ void __launch_bounds__(kThreads) mma_kernel(const MmaParams p) {
  static_assert(HK % 16 == 0 && HV % 16 == 0 && BC % 16 == 0, "mma tiles are 16 wide");
  constexpr int KS = HK + 8, VS = HV + 8;  // padded rows: fragment loads and ldmatrix without bank conflicts
  __shared__ __align__(16) uint16_t k_sh[BC * KS];
  __shared__ __align__(16) uint16_t v_sh[BC * VS];
  __shared__ int row_pos[kRows];

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, gid = lane / 4, tig = lane % 4;
  const int group = p.n_head / p.n_head_kv, g = blockIdx.y;
  const int64_t rows_total = p.n_tok * group, r0 = int64_t(blockIdx.x) * kRows;
  if (tid < kRows) {
    const int64_t R = r0 + tid;
    row_pos[tid] = R < rows_total ? p.pos[R / group] : -1;  // -1: a padding row, never stored
  }
  __syncthreads();
  int max_pos = -1, min_pos = INT_MAX;
  for (int r = 0; r < kRows; ++r) {
    const int pr = row_pos[r];
    if (pr >= 0) max_pos = max(max_pos, pr), min_pos = min(min_pos, pr);
  }
  int my_pos[2];
  const float* qrow[2];
  float* orow[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + gid + 8 * i;
    const int64_t R = r0 + r;
    my_pos[i] = row_pos[r];
    const int64_t qi = R < rows_total ? ((R / group) * p.n_head + int64_t(g) * group + R % group) : -1;
    qrow[i] = qi >= 0 ? p.q + qi * HK : nullptr;
    orow[i] = qi >= 0 ? p.out + qi * HV : nullptr;
  }
  // Q as A fragments for every 16-wide slice of the head, rounded to f16 as the CPU rounds q.
  uint32_t qa[HK / 16][4];
#pragma unroll
  for (int kk = 0; kk < HK / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float* qr = qrow[i & 1];
      const float2 x = qr ? *reinterpret_cast<const float2*>(qr + kk * 16 + (i >> 1) * 8 + 2 * tig)
                          : make_float2(0.0f, 0.0f);
      qa[kk][i] = pack_f16(x.x, x.y);
    }

  float o[HV / 8][4];
#pragma unroll
  for (int nt = 0; nt < HV / 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  float m2[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows gid and gid + 8: max (base 2), this lane's sum

  const int64_t kv_k = int64_t(p.n_head_kv) * HK, kv_v = int64_t(p.n_head_kv) * HV;
  const uint16_t* kb = p.k + int64_t(g) * HK;
  const uint16_t* vb = p.v + int64_t(g) * HV;
  const int kv_end = max_pos + 1;  // no row of the block sees a later position
  for (int j0 = 0; j0 < kv_end; j0 += BC) {
    const int n_c = min(BC, kv_end - j0);
    __syncthreads();  // the previous tile's k_sh and v_sh consumed
    // Rows past n_c are zeroed: their scores are masked, but P·V multiplies them by 0 and stale NaNs would survive.
    for (int i = tid; i < BC * (HK / 8); i += kThreads) {
      const int j = i / (HK / 8), c8 = i % (HK / 8);
      uint4 x = make_uint4(0, 0, 0, 0);
      if (j < n_c) x = __ldg(reinterpret_cast<const uint4*>(kb + (j0 + j) * kv_k) + c8);
      *reinterpret_cast<uint4*>(k_sh + j * KS + c8 * 8) = x;
    }
    for (int i = tid; i < BC * (HV / 8); i += kThreads) {
      const int j = i / (HV / 8), c8 = i % (HV / 8);
      uint4 x = make_uint4(0, 0, 0, 0);
      if (j < n_c) x = __ldg(reinterpret_cast<const uint4*>(vb + (j0 + j) * kv_v) + c8);
      *reinterpret_cast<uint4*>(v_sh + j * VS + c8 * 8) = x;
    }
    __syncthreads();

    // S = Q Kᵀ for the warp's 16 rows and the tile's BC keys: B[k][n] = K[key n][dim k].
    float s[BC / 8][4];
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      const uint16_t* kr = k_sh + (nt * 8 + gid) * KS + 2 * tig;
#pragma unroll
      for (int kk = 0; kk < HK / 16; ++kk) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(kr + kk * 16);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(kr + kk * 16 + 8);
        mma_16816(s[nt], qa[kk], b0, b1);
      }
    }
    // Scale to base 2, mask keys past each row's position (only where the tile reaches past the block's first row),
    // and the rows' maxima over the quad of lanes that shares them.
    const bool need_mask = j0 + BC - 1 > min_pos;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = j0 + nt * 8 + 2 * tig + (i & 1);
        float x = s[nt][i] * p.scale_log2;
        if (need_mask && j > my_pos[i >> 1]) x = -INFINITY;
        s[nt][i] = x;
        mx[i >> 1] = fmaxf(mx[i >> 1], x);
      }
    float mu[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      const float m_new = fmaxf(m2[i], mx[i]);
      // A row with no visible key yet (a padding row) keeps -inf: subtract 0 instead, so every term is e^-inf = 0
      // rather than e^(-inf + inf) = NaN.
      mu[i] = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m2[i] - mu[i]);
      m2[i] = m_new;
      l[i] *= alpha;
#pragma unroll
      for (int nt = 0; nt < HV / 8; ++nt) o[nt][2 * i] *= alpha, o[nt][2 * i + 1] *= alpha;
    }
    // P rounded to f16 as the A fragments of P·V (the C layout of two adjacent 8-key tiles is the A layout of one
    // 16-key slice); the sums add the rounded values, so the weights P·V uses are normalized exactly.
    uint32_t pa[BC / 16][4];
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float* sv = s[2 * kk + (i >> 1)] + 2 * (i & 1);
        const uint16_t e0 = dev::f32_to_f16(exp2f(sv[0] - mu[i & 1]));
        const uint16_t e1 = dev::f32_to_f16(exp2f(sv[1] - mu[i & 1]));
        l[i & 1] += dev::f16_to_f32(e0) + dev::f16_to_f32(e1);
        pa[kk][i] = uint32_t(e0) | (uint32_t(e1) << 16);
      }
    // O += P V: B[k][n] = V[key k][dim n], loaded transposed from the row-major tile.
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
      for (int nd = 0; nd < HV / 16; ++nd) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_sh + (kk * 16 + (lane & 15)) * VS + nd * 16 + (lane >> 4) * 8);
        mma_16816(o[2 * nd], pa[kk], b[0], b[1]);
        mma_16816(o[2 * nd + 1], pa[kk], b[2], b[3]);
      }
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    if (orow[i] == nullptr) continue;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
#pragma unroll
    for (int nt = 0; nt < HV / 8; ++nt)
      *reinterpret_cast<float2*>(orow[i] + nt * 8 + 2 * tig) = make_float2(o[nt][2 * i] * inv, o[nt][2 * i + 1] * inv);
  }
}

// Parts per sequence the workspace allows for a batch of n_tok over a cache of n_ctx positions.
int split_cap(int64_t n_tok, int64_t n_ctx) {
  if (n_tok > kMaxSlots) return 1;
  return int(std::min<int64_t>(kMaxSlots / n_tok, (n_ctx + kMinPart - 1) / kMinPart));
}

template <int HK, int HV, int BC>
void launch_mma(const AttentionArgs& a) {
  const int group = a.n_head / a.n_head_kv;
  const int64_t blocks = (a.n_tok * group + kRows - 1) / kRows;
  DF_CHECK(blocks <= 0x7fffffff && a.n_head_kv <= 65535);
  const MmaParams p{a.q, a.k, a.v, a.out, a.pos, a.n_tok, a.n_head, a.n_head_kv, a.scale * 1.4426950408889634f};
  mma_kernel<HK, HV, BC><<<dim3(unsigned(blocks), unsigned(a.n_head_kv)), kThreads, 0, a.stream>>>(p);
  DF_CUDA_CHECK_LAUNCH();
}

// The head dims the tensor-core kernel is built for (others take the split kernel at any batch size).
bool launch_mma_if_built(const AttentionArgs& a) {
  if (a.head_dim_k != a.head_dim_v) return false;
  switch (a.head_dim_k) {
    case 64: launch_mma<64, 64, 64>(a); return true;
    case 128: launch_mma<128, 128, 64>(a); return true;
    case 256: launch_mma<256, 256, 32>(a); return true;  // 32 keys per tile keeps the registers within bounds
    default: return false;
  }
}

// The warp-split kernel for the head dims and group sizes it is built for (false: the split kernel takes them).
bool launch_warp_split_if_built(const AttentionArgs& a, dim3 grid, const SplitParams& p) {
  const int group = a.n_head / a.n_head_kv;
  if (a.head_dim_k != a.head_dim_v || group > 8) return false;
  const bool wide = group > 4;
  switch (a.head_dim_k) {
    case 64: launch_early(wide ? warp_split_kernel<64, 8> : warp_split_kernel<64, 4>, grid, kThreads, 0, a.stream, p); return true;
    case 128: launch_early(wide ? warp_split_kernel<128, 8> : warp_split_kernel<128, 4>, grid, kThreads, 0, a.stream, p); return true;
    default: return false;
  }
}

}  // namespace

void attention(const AttentionArgs& a) {
  DF_CHECK(a.q != nullptr && a.k != nullptr && a.v != nullptr && a.out != nullptr && a.pos != nullptr);
  DF_CHECK(a.n_head > 0 && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0);
  DF_CHECK(a.head_dim_k > 0 && a.head_dim_k <= kMaxHead && a.head_dim_v > 0 && a.head_dim_v <= kMaxHead);
  // 16-byte row loads: head dims a multiple of 8 halves, the caches 16-byte aligned.
  DF_CHECK(a.head_dim_k % 8 == 0 && a.head_dim_v % 8 == 0);
  DF_CHECK(reinterpret_cast<uintptr_t>(a.k) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v) % 16 == 0);
  DF_CHECK(a.n_tok >= 0 && a.n_tok <= 65535);
  DF_CHECK(a.work == nullptr || a.n_ctx > 0);
  DF_CHECK(a.out_q8 == nullptr || a.head_dim_v % dev::kQK == 0);
  if (a.n_tok == 0) return;
  DF_CHECK(a.window >= 0);
  // The tensor-core kernel masks causally only: sliding windows take the split kernel (its blocks see at most the
  // window's positions).
  if (a.n_tok > kSplitMaxTok && a.window == 0 && launch_mma_if_built(a)) return;

  DF_CHECK(reinterpret_cast<uintptr_t>(a.q) % 16 == 0);  // the split kernel reads q in quads
  const int group = a.n_head / a.n_head_kv;
  const int n_hsub = (group + kHeadsPerBlock - 1) / kHeadsPerBlock;
  int n_split = 1;
  if (a.work != nullptr) {
    // About two blocks per SM when every part has positions; fixed by n_ctx, not by the positions in use.
    const int64_t per_part = a.n_tok * a.n_head_kv * n_hsub;
    const int64_t want = (2 * int64_t(sm_count()) + per_part - 1) / per_part;
    n_split = int(std::clamp<int64_t>(want, 1, split_cap(a.n_tok, a.n_ctx)));
  }
  DF_CHECK(int64_t(a.n_head_kv) * n_hsub <= 65535);
  const SplitParams p{a.q,          a.k,         a.v,          a.out,   a.work, a.pos,  a.n_head,
                      a.n_head_kv, a.head_dim_k, a.head_dim_v, n_split, n_hsub, a.scale, a.window};
  const dim3 grid(unsigned(n_split), unsigned(a.n_head_kv * n_hsub), unsigned(a.n_tok));
  if (!launch_warp_split_if_built(a, grid, p)) {
    // The smallest build that holds the heads: half the shared memory and registers of the next for heads of 128.
    if (std::max(a.head_dim_k, a.head_dim_v) <= 128) {
      launch_early(split_kernel<128>, grid, kThreads, split_smem<128>(), a.stream, p);
    } else if (std::max(a.head_dim_k, a.head_dim_v) <= 256) {
      launch_early(split_kernel<256>, grid, kThreads, split_smem<256>(), a.stream, p);
    } else {
      // Past the 48 KiB a launch gets by default (once per process: the device is the same for every session).
      static const bool allowed = [] {
        DF_CUDA_CHECK(cudaFuncSetAttribute(split_kernel<512>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(split_smem<512>())));
        return true;
      }();
      (void)allowed;
      launch_early(split_kernel<512>, grid, kThreads, split_smem<512>(), a.stream, p);
    }
  }
  if (n_split > 1)
    launch_early(merge_kernel, dim3(unsigned(a.n_head), unsigned(a.n_tok)), kThreads, 0, a.stream,
                 static_cast<const float*>(a.work), a.out, static_cast<const int32_t*>(a.pos), a.n_head, a.head_dim_v,
                 n_split, a.window, a.out_q8);
  else if (a.out_q8 != nullptr)
    quantize_q8_0({.x = a.out, .y = a.out_q8, .n_rows = a.n_tok, .cols = int64_t(a.n_head) * a.head_dim_v,
                   .stream = a.stream});
}

}  // namespace df::cuda
