// Hot kernels at the shapes of a Qwen3-30B-A3B decode and prefill step, timed with CUDA events and printed as GB/s
// of weights read (against the H200's ~4.3 TB/s) for the benchmark notes; each checks sampled outputs against the
// CPU reference, so a fast wrong kernel fails. Timings are printed, never asserted.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "diskformer/backend/cpu/ops.h"
#include "gpu/gpu_support.h"
#include "gpu/kernel_support.h"

namespace df::test {
namespace {

using gguf::GgmlType;

void check_rows(const HostMat& w, const std::vector<float>& x, const std::vector<float>& got, int64_t n_tok,
                int64_t out_rows, const std::vector<int64_t>& rows, int64_t row_offset = 0) {
  auto ctx = scalar_context();
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t r : rows) {
      HostMat one{w.type, 1, w.cols, w.row_bytes,
                  std::vector<uint8_t>(w.bytes.begin() + (row_offset + r) * w.row_bytes,
                                       w.bytes.begin() + (row_offset + r + 1) * w.row_bytes)};
      float want = 0;
      cpu::matmul(ctx, one.mat(), x.data() + t * w.cols, 1, &want);
      const double tol = 1.1 * sum_order_tolerance(w.cols, abs_dot(one, 0, x.data() + t * w.cols));
      ASSERT_NEAR(got[t * out_rows + r], want, tol) << "token " << t << " row " << r;
    }
}

// The output head of a 151,936-token vocabulary over d = 2048, one token (decode) and 16.
TEST(CudaThroughput, OutputHeadQ4_0) {
  DF_REQUIRE_GPU();
  const int64_t rows = 151936, cols = 2048;
  const HostMat w = random_q4(rows, cols, 1);
  cuda::DeviceBuffer dw(w.bytes.size());
  dw.upload(w.bytes.data(), w.bytes.size());
  for (int64_t n_tok : {1, 16}) {
    const auto x = random_floats(n_tok * cols, 2);
    auto dx = cuda::to_device(x);
    cuda::DeviceBuffer dy(n_tok * rows * 4), scratch(cuda::q8_scratch_bytes(GgmlType::Q4_0, cols, n_tok));
    const cuda::MatmulArgs args{.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = n_tok, .y = dy.as<float>(),
                                .scratch = scratch.as<uint8_t>()};
    const double ms = time_ms(20, [&] { cuda::matmul(args); });
    std::vector<float> got(n_tok * rows);
    DF_CUDA_CHECK(cudaDeviceSynchronize());
    dy.download(got.data(), got.size() * 4);
    check_rows(w, x, got, n_tok, rows, {0, 1, 77777, rows - 1});
    std::printf("[throughput] matmul Q4_0 %lldx%lld n_tok %lld: %.3f ms, %.0f GB/s of weights\n", (long long)rows,
                (long long)cols, (long long)n_tok, ms, double(w.bytes.size()) / ms / 1e6);
  }
}

// One MoE layer's gate projection: 128 experts of 768 x 2048, top-8. Decode (1 token) per slot; prefill (512
// tokens) per slot and grouped by expert.
TEST(CudaThroughput, ExpertGateQ4_0) {
  DF_REQUIRE_GPU();
  const int64_t X = 128, F = 768, E = 2048;
  const int K = 8;
  const HostMat w = random_q4(X * F, E, 3);
  cuda::DeviceBuffer dw(w.bytes.size());
  dw.upload(w.bytes.data(), w.bytes.size());
  const model::Mat one{GgmlType::Q4_0, dw.as<uint8_t>(), E, F, w.row_bytes};
  const uint64_t stride = uint64_t(F) * w.row_bytes;
  std::mt19937 rng(4);
  for (int64_t n_tok : {1, 512}) {
    std::vector<int32_t> ids(n_tok * K);
    for (int64_t t = 0; t < n_tok; ++t) {
      std::vector<int32_t> all(X);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::copy_n(all.begin(), K, ids.begin() + t * K);
    }
    const int64_t n_slots = n_tok * K;
    const auto x = random_floats(n_tok * E, 5);
    auto dx = cuda::to_device(x);
    auto dids = cuda::to_device(ids);
    cuda::DeviceBuffer dy(n_slots * F * 4), scratch(cuda::q8_scratch_bytes(GgmlType::Q4_0, E, n_slots));
    const cuda::MoeMatmulArgs args{.w = one, .expert_stride = stride, .n_expert = int32_t(X),
                                   .ids = dids.as<int32_t>(), .n_tok = n_tok, .n_used = K, .x = dx.as<float>(),
                                   .y = dy.as<float>(), .scratch = scratch.as<uint8_t>()};
    const double ms = time_ms(10, [&] { cuda::moe_matmul(args); });
    std::vector<float> got(n_slots * F);
    DF_CUDA_CHECK(cudaDeviceSynchronize());
    dy.download(got.data(), got.size() * 4);
    // Slot 0 and the last slot: rows of their experts.
    for (int64_t v : {int64_t(0), n_slots - 1}) {
      std::vector<float> xv(x.begin() + (v / K) * E, x.begin() + (v / K + 1) * E);
      std::vector<float> gv(got.begin() + v * F, got.begin() + (v + 1) * F);
      check_rows(w, xv, gv, 1, F, {0, 5, F - 1}, int64_t(ids[v]) * F);
    }
    // Distinct experts' bytes: what a perfect kernel reads once.
    std::vector<int32_t> distinct = ids;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    const double bytes = double(distinct.size()) * double(stride);
    std::printf("[throughput] moe_matmul Q4_0 %lld experts %lldx%lld top-%d n_tok %lld per slot: %.3f ms, %.0f GB/s "
                "of distinct expert weights\n",
                (long long)X, (long long)F, (long long)E, K, (long long)n_tok, ms, bytes / ms / 1e6);
    if (n_tok > 1) {
      cuda::DeviceBuffer order(n_slots * 4), tiles((1 + 3 * cuda::moe_max_tiles(n_slots, X)) * 4);
      cuda::DeviceBuffer gathered(n_slots * E * 4), dg(n_slots * F * 4);
      const double gms = time_ms(10, [&] {
        cuda::moe_plan({.ids = dids.as<int32_t>(), .n_slots = n_slots, .n_expert = int32_t(X),
                        .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>()});
        cuda::moe_matmul_grouped({.w = one, .expert_stride = stride, .n_expert = int32_t(X),
                                  .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>(), .n_slots = n_slots,
                                  .n_used = K, .x = dx.as<float>(), .gathered = gathered.as<float>(),
                                  .y = dg.as<float>(), .scratch = scratch.as<uint8_t>()});
      });
      std::vector<float> grouped(n_slots * F);
      DF_CUDA_CHECK(cudaDeviceSynchronize());
      dg.download(grouped.data(), grouped.size() * 4);
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += grouped[i] != got[i];
      EXPECT_EQ(differ, 0u) << "outputs of the grouped product that differ from the per-slot product";
      std::printf("[throughput] moe_matmul_grouped (plan + gather + product) n_tok %lld: %.3f ms (per slot %.3f ms)\n",
                  (long long)n_tok, gms, ms);
    }
  }
}

// Decode attention of one token over 512 and 4096 cached positions: 32 query heads, 4 KV heads, head 128.
TEST(CudaThroughput, DecodeAttention) {
  DF_REQUIRE_GPU();
  const int n_head = 32, n_kv = 4, hd = 128;
  for (int64_t n_pos : {512, 4096}) {
    const int64_t kd = int64_t(n_kv) * hd;
    auto q = random_floats(n_head * hd, 6);
    auto kf = random_floats(n_pos * kd, 7), vf = random_floats(n_pos * kd, 8);
    std::vector<uint16_t> k16(kf.size()), v16(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) k16[i] = cpu::f32_to_f16(kf[i]), v16[i] = cpu::f32_to_f16(vf[i]);
    auto dq = cuda::to_device(q), dk = cuda::to_device(k16), dv = cuda::to_device(v16);
    auto dpos = cuda::to_device(std::vector<int32_t>{int32_t(n_pos - 1)});
    cuda::DeviceBuffer dout(n_head * hd * 4), work(cuda::attention_work_bytes(1, n_head, hd, n_pos));
    const float scale = 1.0f / std::sqrt(float(hd));
    const cuda::AttentionArgs args{.q = dq.as<float>(), .k = dk.as<uint16_t>(), .v = dv.as<uint16_t>(),
                                   .out = dout.as<float>(), .pos = dpos.as<int32_t>(), .n_head = n_head,
                                   .n_head_kv = n_kv, .head_dim_k = hd, .head_dim_v = hd, .n_tok = 1, .scale = scale,
                                   .n_ctx = n_pos, .work = work.as<float>()};
    const double ms = time_ms(20, [&] { cuda::attention(args); });
    std::vector<float> want(n_head * hd), got(n_head * hd);
    auto ctx = scalar_context();
    cpu::attention(ctx, {.q = q.data(), .k = k16.data(), .v = v16.data(), .out = want.data(), .n_head = n_head,
                         .n_head_kv = n_kv, .head_dim_k = hd, .head_dim_v = hd, .pos0 = n_pos - 1, .n_tok = 1,
                         .scale = scale});
    DF_CUDA_CHECK(cudaDeviceSynchronize());
    dout.download(got.data(), got.size() * 4);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 4e-3) << i;
    std::printf("[throughput] attention decode %d/%d heads of %d over %lld positions: %.3f ms, %.0f GB/s of KV\n",
                n_head, n_kv, hd, (long long)n_pos, ms, double(n_pos * kd * 4) / ms / 1e6);
  }
}

}  // namespace
}  // namespace df::test
