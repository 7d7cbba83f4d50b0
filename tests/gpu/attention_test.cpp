// cuda::attention against two references on random data: the CPU engine's cpu::attention, and an exact evaluation in
// double of the same operation (q rounded to f16, the f16 cache as stored). The exact one checks each GPU kernel's
// own arithmetic at a tight tolerance; the CPU one checks agreement with the engine at the tolerance its f16
// accumulator needs.
//
// Tolerances, as fractions of max|v| (outputs are weighted means of value rows):
// - split kernel (decode, small batches, other head dims) vs exact: 3e-4. Everything is f32; the longest chain of
//   additions is a part's positions (at most 4,608 in the direct form) then the merge, worst case 4,608 * 2^-24 =
//   2.7e-4 of the sum's magnitude; score and expf errors (~1e-6 relative) add little.
// - tensor-core kernel (batches of more than 16 tokens at head dims 64/128/256) vs exact: 1.5e-3. The probabilities
//   are rounded to f16 for P·V (relative 2^-11 each) and the sum adds the rounded values, so the output is an exactly
//   normalized mean with weights off by 2^-11 at most: error <= 2^-11 * max|v - out| <= 2^-10 * max|v| = 9.8e-4;
//   the rest covers the tensor cores' f32 accumulation of the scores.
// - vs cpu::attention: 1e-2. The CPU rounds its value accumulator to f16 after every position (up to 2^-11 of the
//   running sum each time, a random walk over the positions); its own distance from the exact result, printed per
//   case, measured up to 1.4e-3 with q in +-2 and 4.3e-3 with peaked scores (q in +-8, 400 positions).
// Every case also puts f16 NaNs in the cache past the last position, so reading beyond pos[t] fails the test.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <thread>

#include "diskformer/backend/cpu/ops.h"
#include "gpu/gpu_support.h"
#include "gpu/kernel_support.h"

namespace df::test {
namespace {

constexpr uint16_t kF16NaN = 0x7e00;

struct AttnCase {
  int n_head, n_head_kv, hk, hv;
  int64_t pos0, n_tok;
  float q_range = 2.0f;  // q uniform in +-q_range: 8 gives peaked softmaxes whose maximum moves often
  bool work = true;      // pass a workspace (the split over positions); false: one part per sequence
  int64_t spare = 37;    // cache positions past the sequence (filled with NaN)
  int64_t window = 0;    // > 0: a sliding-window layer's last `window` positions
};

int64_t first_key(const AttnCase& c, int64_t last) { return c.window > 0 ? std::max<int64_t>(0, last - c.window + 1) : 0; }

cpu::ThreadPool& pool() {
  static cpu::ThreadPool p(int(std::max(1u, std::thread::hardware_concurrency())));
  return p;
}

// Inputs of one case: q [n_tok][n_head][hk] f32, caches [n_ctx][n_kv][h] f16 with NaN past n_pos.
struct AttnData {
  int64_t n_pos = 0, n_ctx = 0;
  std::vector<float> q;
  std::vector<uint16_t> k16, v16;
  std::vector<int32_t> pos;
  float max_v = 0;
};

AttnData make_data(const AttnCase& c, uint32_t seed) {
  AttnData d;
  d.n_pos = c.pos0 + c.n_tok;
  d.n_ctx = d.n_pos + c.spare;
  const int64_t kd = int64_t(c.n_head_kv) * c.hk, vd = int64_t(c.n_head_kv) * c.hv;
  d.q = random_floats(c.n_tok * c.n_head * c.hk, seed, -c.q_range, c.q_range);
  const auto kf = random_floats(d.n_pos * kd, seed + 1), vf = random_floats(d.n_pos * vd, seed + 2);
  d.k16.assign(d.n_ctx * kd, kF16NaN);
  d.v16.assign(d.n_ctx * vd, kF16NaN);
  for (size_t i = 0; i < kf.size(); ++i) d.k16[i] = cpu::f32_to_f16(kf[i]);
  for (size_t i = 0; i < vf.size(); ++i) {
    d.v16[i] = cpu::f32_to_f16(vf[i]);
    d.max_v = std::max(d.max_v, std::fabs(cpu::f16_to_f32(d.v16[i])));
  }
  d.pos.resize(c.n_tok);
  std::iota(d.pos.begin(), d.pos.end(), int32_t(c.pos0));
  return d;
}

// The exact result (double) of (token t, head h), t in `tokens`: softmax(scale * q16 . k) over positions 0 .. pos[t]
// (the window's only where the case has one).
std::vector<double> exact_attention(const AttnCase& c, const AttnData& d, float scale,
                                    const std::vector<int64_t>& tokens) {
  std::vector<double> out(tokens.size() * c.n_head * c.hv);
  const int group = c.n_head / c.n_head_kv;
  const int64_t kd = int64_t(c.n_head_kv) * c.hk, vd = int64_t(c.n_head_kv) * c.hv;
  pool().run(int64_t(tokens.size()) * c.n_head, [&](int64_t task) {
    const int64_t ti = task / c.n_head, t = tokens[ti];
    const int h = int(task % c.n_head), g = h / group;
    std::vector<double> q(c.hk), s(d.pos[t] + 1), o(c.hv, 0.0);
    for (int i = 0; i < c.hk; ++i) q[i] = cpu::f16_to_f32(cpu::f32_to_f16(d.q[(t * c.n_head + h) * c.hk + i]));
    double m = -INFINITY;
    const int64_t j0 = first_key(c, d.pos[t]);
    for (int64_t j = j0; j <= d.pos[t]; ++j) {
      double dot = 0;
      for (int i = 0; i < c.hk; ++i) dot += q[i] * cpu::f16_to_f32(d.k16[j * kd + int64_t(g) * c.hk + i]);
      s[j] = double(scale) * dot;
      m = std::max(m, s[j]);
    }
    double sum = 0;
    for (int64_t j = j0; j <= d.pos[t]; ++j) {
      const double p = std::exp(s[j] - m);
      sum += p;
      for (int i = 0; i < c.hv; ++i) o[i] += p * cpu::f16_to_f32(d.v16[j * vd + int64_t(g) * c.hv + i]);
    }
    for (int i = 0; i < c.hv; ++i) out[(ti * c.n_head + h) * c.hv + i] = o[i] / sum;
  });
  return out;
}

// The GPU's output of one case, with a workspace when c.work; n_ctx as a session would pass it.
std::vector<float> gpu_attention(const AttnCase& c, const AttnData& d, float scale) {
  auto dq = cuda::to_device(d.q);
  auto dk = cuda::to_device(d.k16);
  auto dv = cuda::to_device(d.v16);
  auto dpos = cuda::to_device(d.pos);
  cuda::DeviceBuffer dout(c.n_tok * c.n_head * c.hv * 4);
  DF_CUDA_CHECK(cudaMemset(dout.data(), 0xff, dout.size()));  // NaN: an output never written fails
  const uint64_t wb = c.work ? cuda::attention_work_bytes(c.n_tok, c.n_head, c.hv, d.n_ctx) : 0;
  cuda::DeviceBuffer work(std::max<uint64_t>(wb, 4));
  cuda::attention({.q = dq.as<float>(), .k = dk.as<uint16_t>(), .v = dv.as<uint16_t>(), .out = dout.as<float>(),
                   .pos = dpos.as<int32_t>(), .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim_k = c.hk,
                   .head_dim_v = c.hv, .n_tok = c.n_tok, .scale = scale, .n_ctx = d.n_ctx,
                   .work = c.work ? work.as<float>() : nullptr, .window = c.window});
  DF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(c.n_tok * c.n_head * c.hv);
  dout.download(got.data(), got.size() * 4);
  return got;
}

// The same with the output's Q8_0 blocks written beside it (out_q8, as decode's output projection takes them):
// they must equal quantize_q8_0's of that output.
std::vector<float> gpu_attention_q8(const AttnCase& c, const AttnData& d, float scale) {
  auto dq = cuda::to_device(d.q);
  auto dk = cuda::to_device(d.k16);
  auto dv = cuda::to_device(d.v16);
  auto dpos = cuda::to_device(d.pos);
  const int64_t od = int64_t(c.n_head) * c.hv;
  cuda::DeviceBuffer dout(c.n_tok * od * 4), q8(cuda::q8_scratch_bytes(gguf::GgmlType::Q8_0, od, c.n_tok));
  cuda::DeviceBuffer q8_want(q8.size());
  cuda::DeviceBuffer work(cuda::attention_work_bytes(c.n_tok, c.n_head, c.hv, d.n_ctx));
  cuda::attention({.q = dq.as<float>(), .k = dk.as<uint16_t>(), .v = dv.as<uint16_t>(), .out = dout.as<float>(),
                   .pos = dpos.as<int32_t>(), .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim_k = c.hk,
                   .head_dim_v = c.hv, .n_tok = c.n_tok, .scale = scale, .n_ctx = d.n_ctx,
                   .work = c.work ? work.as<float>() : nullptr, .window = c.window, .out_q8 = q8.as<uint8_t>()});
  cuda::quantize_q8_0({.x = dout.as<float>(), .y = q8_want.as<uint8_t>(), .n_rows = c.n_tok, .cols = od});
  DF_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(download<uint8_t>(q8, q8.size()), download<uint8_t>(q8_want, q8.size())) << "out_q8";
  return download<float>(dout, c.n_tok * od);
}

// The batches that run on tensor cores (kernels.h: more than 16 tokens, equal head dims 64/128/256).
bool tensor_cores(const AttnCase& c) {
  return c.n_tok > 16 && c.window == 0 && c.hk == c.hv && (c.hk == 64 || c.hk == 128 || c.hk == 256);
}

class CudaAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CudaAttention, MatchesExactAndCpuAttention) {
  DF_REQUIRE_GPU();
  const AttnCase c = GetParam();
  const AttnData d = make_data(c, 41 + uint32_t(c.n_tok + c.pos0));
  const float scale = 1.0f / std::sqrt(float(c.hk));
  std::vector<float> want(c.n_tok * c.n_head * c.hv);
  auto ctx = scalar_context();
  ctx.pool = &pool();
  cpu::attention(ctx, {.q = d.q.data(), .k = d.k16.data(), .v = d.v16.data(), .out = want.data(),
                       .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim_k = c.hk, .head_dim_v = c.hv,
                       .pos0 = c.pos0, .n_tok = c.n_tok, .scale = scale, .window = c.window});
  std::vector<int64_t> all(c.n_tok);
  std::iota(all.begin(), all.end(), 0);
  const auto exact = exact_attention(c, d, scale, all);
  const auto got = gpu_attention(c, d, scale);

  const double tol_exact = (tensor_cores(c) ? 1.5e-3 : 3e-4) * d.max_v, tol_cpu = 1e-2 * d.max_v;
  double worst_exact = 0, worst_cpu = 0, cpu_exact = 0;
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - exact[i]), ec = std::fabs(double(got[i]) - double(want[i]));
    cpu_exact = std::max(cpu_exact, std::fabs(double(want[i]) - exact[i]));
    const bool ok = e <= tol_exact && ec <= tol_cpu;  // false for NaN too
    if (!ok && bad++ == 0) first_bad = i;
    worst_exact = std::max(worst_exact, std::isnan(e) ? INFINITY : e);
    worst_cpu = std::max(worst_cpu, std::isnan(ec) ? INFINITY : ec);
  }
  EXPECT_EQ(bad, 0u) << "outputs outside tolerance; first: element " << first_bad << " got " << got[first_bad]
                     << " exact " << exact[first_bad] << " cpu " << want[first_bad] << " (tolerances " << tol_exact
                     << " vs exact, " << tol_cpu << " vs cpu)";
  if (!tensor_cores(c) && c.hv % 32 == 0) {
    // With the Q8_0 blocks beside it (the merge, or quantize_q8_0 after a single part): the same floats.
    const auto with_q8 = gpu_attention_q8(c, d, scale);
    ASSERT_EQ(with_q8.size(), got.size());
    EXPECT_EQ(std::memcmp(with_q8.data(), got.data(), got.size() * sizeof(float)), 0) << "with out_q8";
  }
  std::printf("[attention] %s heads %d/%d dims %d/%d pos0 %lld n_tok %lld%s: max diff vs exact %.2e (tol %.1e), "
              "vs cpu %.2e (tol %.1e); cpu vs exact %.2e\n",
              tensor_cores(c) ? "mma  " : "split", c.n_head, c.n_head_kv, c.hk, c.hv, (long long)c.pos0,
              (long long)c.n_tok, c.work ? "" : " (no workspace)", worst_exact, tol_exact, worst_cpu, tol_cpu,
              cpu_exact);
}

std::vector<AttnCase> attention_cases() {
  std::vector<AttnCase> v;
  // Decode: GQA ratios 1, 4, 8 (two KV heads), head dims 64/128/256, contexts around the 16/32-position tiling.
  for (int ratio : {1, 4, 8})
    for (int hd : {64, 128, 256})
      for (int64_t ctx : {1, 63, 64, 65, 1000, 4096}) v.push_back({2 * ratio, 2, hd, hd, ctx - 1, 1});
  // Decode variants: other head dims, groups of 16 and 32 heads (several blocks per group), peaked scores, no
  // workspace, and a cache much larger than the sequence (as a session's n_ctx).
  v.push_back({6, 3, 96, 80, 511, 1});
  v.push_back({16, 1, 128, 128, 999, 1});
  v.push_back({32, 1, 128, 128, 999, 1});
  v.push_back({8, 2, 128, 128, 999, 1, 8.0f});
  v.push_back({8, 2, 128, 128, 999, 1, 2.0f, false});
  v.push_back({32, 4, 128, 128, 64, 1, 2.0f, true, 4000});
  // Groups the warp-split kernel pads to 8 and 4 heads, and its sliding windows (decode and a small batch).
  v.push_back({12, 2, 128, 128, 999, 1});
  v.push_back({6, 2, 64, 64, 999, 1});
  for (int64_t window : {1, 64}) {
    v.push_back({16, 2, 128, 128, 2000, 1, 2.0f, true, 37, window});
    v.push_back({16, 2, 128, 128, 1500, 9, 2.0f, true, 37, window});
  }
  // Small batches (split kernel): from position 0 and after a prefix.
  for (int64_t n_tok : {2, 5, 16}) {
    v.push_back({8, 2, 128, 128, 0, n_tok});
    v.push_back({8, 1, 64, 64, 777, n_tok});
  }
  // Batches on tensor cores: ratios 1, 4, 8 and head dims 64/128/256, at position 0 and after a prefix.
  for (int ratio : {1, 4, 8})
    for (int hd : {64, 128, 256}) {
      v.push_back({2 * ratio, 2, hd, hd, 0, 17});
      v.push_back({2 * ratio, 2, hd, hd, 300, 100});
    }
  v.push_back({8, 2, 128, 128, 300, 100, 8.0f});
  v.push_back({32, 1, 128, 128, 5, 65});    // 32 heads per group: rows span 2 tokens per block
  v.push_back({6, 3, 128, 128, 40, 64});    // a group of 2: 32 tokens per block
  for (int64_t pos0 : {0, 100}) {
    v.push_back({8, 1, 128, 128, pos0, 512});
    v.push_back({4, 1, 64, 64, pos0, 512});
    v.push_back({2, 1, 256, 256, pos0, 512});
  }
  // Head dims without a tensor-core kernel at batch sizes that would take it: the split kernel, with and without
  // a workspace.
  v.push_back({6, 3, 96, 80, 10, 40});
  v.push_back({6, 3, 96, 80, 10, 40, 2.0f, false});
  v.push_back({4, 2, 64, 128, 0, 200});
  // gemma4's heads of 512 (full layers) and sliding windows (decode, small and large batches, within and past the
  // window, several parts per window).
  for (int64_t ctx : {1, 65, 1000}) v.push_back({16, 2, 512, 512, ctx - 1, 1});
  v.push_back({16, 2, 512, 512, 100, 40});
  v.push_back({16, 2, 512, 512, 0, 300, 2.0f, false});
  for (int64_t window : {1, 64, 1024}) {
    v.push_back({16, 8, 256, 256, 2000, 1, 2.0f, true, 37, window});
    v.push_back({16, 8, 256, 256, 30, 1, 2.0f, true, 37, window});
    v.push_back({16, 8, 256, 256, 1500, 40, 2.0f, true, 37, window});
  }
  v.push_back({2, 1, 256, 256, 0, 512, 2.0f, true, 37, 64});
  v.push_back({2, 1, 512, 512, 500, 3, 2.0f, true, 37, 32});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention, ::testing::ValuesIn(attention_cases()), [](const auto& i) {
  const AttnCase& c = i.param;
  std::ostringstream name;
  name << "h" << c.n_head << "kv" << c.n_head_kv << "_d" << c.hk << "v" << c.hv << "_pos" << c.pos0 << "_tok"
       << c.n_tok << (c.q_range != 2.0f ? "_peaked" : "") << (c.work ? "" : "_nowork");
  if (c.spare != 37) name << "_ctx" << c.pos0 + c.n_tok + c.spare;
  if (c.window) name << "_window" << c.window;
  return name.str();
});

// Qwen3-30B-A3B's attention (32 query heads, 4 KV heads, head 128, 48 layers) in a session with a 4096-position
// cache: decode at 576 and 4096 positions, prefill of 512 tokens at position 0 and 3584. Times are printed, never
// asserted; sampled tokens are checked against the exact reference so that a fast wrong kernel fails.
TEST(CudaAttentionThroughput, Qwen3MoeShape) {
  DF_REQUIRE_GPU();
  constexpr int kLayers = 48;
  struct Run {
    int64_t pos0, n_tok;
  };
  for (Run r : {Run{575, 1}, Run{4095, 1}, Run{0, 512}, Run{3584, 512}}) {
    const AttnCase c{32, 4, 128, 128, r.pos0, r.n_tok, 2.0f, true, 4096 - r.pos0 - r.n_tok};
    const AttnData d = make_data(c, 7);
    const float scale = 1.0f / std::sqrt(float(c.hk));
    auto dq = cuda::to_device(d.q);
    auto dk = cuda::to_device(d.k16);
    auto dv = cuda::to_device(d.v16);
    auto dpos = cuda::to_device(d.pos);
    cuda::DeviceBuffer dout(c.n_tok * c.n_head * c.hv * 4);
    cuda::DeviceBuffer work(cuda::attention_work_bytes(c.n_tok, c.n_head, c.hv, d.n_ctx));
    const cuda::AttentionArgs args{.q = dq.as<float>(), .k = dk.as<uint16_t>(), .v = dv.as<uint16_t>(),
                                   .out = dout.as<float>(), .pos = dpos.as<int32_t>(), .n_head = c.n_head,
                                   .n_head_kv = c.n_head_kv, .head_dim_k = c.hk, .head_dim_v = c.hv,
                                   .n_tok = c.n_tok, .scale = scale, .n_ctx = d.n_ctx, .work = work.as<float>()};
    const double ms = time_ms(50, [&] { cuda::attention(args); });
    DF_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(c.n_tok * c.n_head * c.hv);
    dout.download(got.data(), got.size() * 4);
    std::vector<int64_t> tokens;
    for (int64_t t = 0; t < c.n_tok; t += 37) tokens.push_back(t);
    if (tokens.back() != c.n_tok - 1) tokens.push_back(c.n_tok - 1);
    const auto exact = exact_attention(c, d, scale, tokens);
    const double tol = (tensor_cores(c) ? 1.5e-3 : 3e-4) * d.max_v;
    double worst = 0;
    for (size_t ti = 0; ti < tokens.size(); ++ti)
      for (int64_t i = 0; i < c.n_head * c.hv; ++i) {
        const double e = std::fabs(double(got[tokens[ti] * c.n_head * c.hv + i]) - exact[ti * c.n_head * c.hv + i]);
        worst = std::max(worst, std::isnan(e) ? INFINITY : e);
      }
    EXPECT_LE(worst, tol) << "pos0 " << c.pos0 << " n_tok " << c.n_tok;
    if (c.n_tok == 1) {
      const double kv_bytes = double(d.n_pos) * c.n_head_kv * (c.hk + c.hv) * 2;
      std::printf("[throughput] attention decode 32/4 heads of 128 over %lld positions: %.1f us per layer "
                  "(%.2f ms per token for %d layers), %.0f GB/s of KV; max diff vs exact %.1e\n",
                  (long long)d.n_pos, ms * 1e3, ms * kLayers, kLayers, kv_bytes / ms / 1e6, worst);
    } else {
      // Useful causal work: 2 flops per multiply-add of Q·Kᵀ and of P·V over the visible positions.
      double pairs = 0;
      for (int64_t t = 0; t < c.n_tok; ++t) pairs += double(c.pos0 + t + 1);
      const double flops = 2.0 * pairs * c.n_head * (c.hk + c.hv);
      std::printf("[throughput] attention prefill 32/4 heads of 128, %lld tokens after %lld: %.3f ms per layer "
                  "(%.1f ms for %d layers), %.1f TFLOP/s; max diff vs exact %.1e\n",
                  (long long)c.n_tok, (long long)c.pos0, ms, ms * kLayers, kLayers, flops / ms / 1e9, worst);
    }
  }
}

}  // namespace
}  // namespace df::test
