// Each CUDA kernel against its CPU reference (include/diskformer/backend/cpu) on random data. Tolerances are stated
// per test: exact where the GPU repeats the CPU's operations in the same order, otherwise the bound of the one
// difference (a summation order, or the device's expf within 2 ulp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "diskformer/backend/cpu/ops.h"
#include "diskformer/cudart/pinned.h"
#include "diskformer/io/buffer.h"
#include "gpu/gpu_support.h"
#include "gpu/kernel_support.h"

namespace df::test {
namespace {

using gguf::GgmlType;

// Relative closeness in units of 2^-23 of the larger magnitude.
std::string type_param_name(const ::testing::TestParamInfo<GgmlType>& i) { return std::string(gguf::type_name(i.param)); }

bool within_ulps(float a, float b, double ulps) {
  return std::fabs(double(a) - double(b)) <= ulps * std::ldexp(1.0, -23) * std::max(std::fabs(a), std::fabs(b)) + 1e-38;
}

TEST(CudaKernels, QuantizeQ8_0IsBitIdenticalToTheCpu) {
  DF_REQUIRE_GPU();
  const int64_t rows = 5, cols = 256;
  auto x = random_floats(rows * cols, 1, -3.0f, 3.0f);
  std::fill_n(x.begin() + 32, 32, 0.0f);  // an all-zero block: scale 0, codes 0
  for (int i = 0; i < 32; ++i) x[64 + i] = 0.5f * float(i - 16);  // exact halves after scaling: ties to even
  std::vector<cpu::BlockQ8_0> want(rows * cols / 32);
  cpu::scalar_kernels().quantize_q8_0(x.data(), want.data(), rows * cols);
  auto dx = cuda::to_device(x);
  cuda::DeviceBuffer dy(want.size() * sizeof(cpu::BlockQ8_0));
  cuda::quantize_q8_0({.x = dx.as<float>(), .y = dy.as<uint8_t>(), .n_rows = rows, .cols = cols});
  auto got = download<cpu::BlockQ8_0>(dy, want.size());
  for (size_t b = 0; b < want.size(); ++b) {
    ASSERT_EQ(got[b].d, want[b].d) << "block " << b;
    ASSERT_EQ(0, std::memcmp(got[b].qs, want[b].qs, 32)) << "block " << b;
  }
}

struct MatmulCase {
  GgmlType type;
  int64_t rows, cols, n_tok;
};

class CudaMatmul : public ::testing::TestWithParam<MatmulCase> {};

// Tolerance: sum_order_tolerance (the f32 accumulation order is the only difference; the Q8_0 activations and the
// integer block dots are exact), with 10% slack for the activations' quantization in the absolute sum.
TEST_P(CudaMatmul, MatchesCpuMatmul) {
  DF_REQUIRE_GPU();
  const auto c = GetParam();
  const HostMat w = random_mat(c.type, c.rows, c.cols, 7);
  const auto x = random_floats(c.n_tok * c.cols, 8);
  std::vector<float> want(c.n_tok * c.rows);
  auto ctx = scalar_context();
  cpu::matmul(ctx, w.mat(), x.data(), c.n_tok, want.data());

  cuda::DeviceBuffer dw(w.bytes.size());
  dw.upload(w.bytes.data(), w.bytes.size());
  auto dx = cuda::to_device(x);
  cuda::DeviceBuffer dy(want.size() * 4);
  cuda::DeviceBuffer scratch(std::max<uint64_t>(1, cuda::q8_scratch_bytes(c.type, c.cols, c.n_tok)));
  cuda::matmul({.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = c.n_tok, .y = dy.as<float>(),
                .scratch = scratch.as<uint8_t>()});
  auto got = download<float>(dy, want.size());
  double worst = 0;
  for (int64_t t = 0; t < c.n_tok; ++t)
    for (int64_t r = 0; r < c.rows; ++r) {
      const double tol = 1.1 * sum_order_tolerance(c.cols, abs_dot(w, r, x.data() + t * c.cols));
      const double diff = std::fabs(double(got[t * c.rows + r]) - double(want[t * c.rows + r]));
      worst = std::max(worst, diff / tol);
      ASSERT_LE(diff, tol) << "token " << t << " row " << r << " got " << got[t * c.rows + r] << " want "
                           << want[t * c.rows + r];
    }
  // Pre-quantized activations shared by several products: the same results bit for bit.
  if (c.type == GgmlType::Q4_0 || c.type == GgmlType::Q8_0) {
    cuda::DeviceBuffer xq(cuda::q8_scratch_bytes(c.type, c.cols, c.n_tok)), dy2(want.size() * 4);
    cuda::quantize_q8_0({.x = dx.as<float>(), .y = xq.as<uint8_t>(), .n_rows = c.n_tok, .cols = c.cols});
    cuda::matmul({.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = c.n_tok, .y = dy2.as<float>(),
                  .x_q8 = xq.as<uint8_t>()});
    EXPECT_EQ(download<float>(dy2, want.size()), got);
  }
  std::printf("[matmul] type %u %lldx%lld n_tok %lld: worst diff %.3f of tolerance\n", unsigned(c.type),
              (long long)c.rows, (long long)c.cols, (long long)c.n_tok, worst);
}

INSTANTIATE_TEST_SUITE_P(
    Types, CudaMatmul,
    ::testing::Values(MatmulCase{GgmlType::Q4_0, 67, 512, 1}, MatmulCase{GgmlType::Q4_0, 130, 2048, 13},
                      MatmulCase{GgmlType::Q8_0, 67, 512, 1}, MatmulCase{GgmlType::Q8_0, 33, 1024, 9},
                      MatmulCase{GgmlType::F16, 67, 96, 1}, MatmulCase{GgmlType::F16, 41, 1000, 8},
                      MatmulCase{GgmlType::BF16, 67, 96, 1}, MatmulCase{GgmlType::BF16, 41, 1000, 17},
                      MatmulCase{GgmlType::F32, 67, 100, 1}, MatmulCase{GgmlType::F32, 5, 64, 3},
                      // a block per row (n_tok <= 4), and cuBLAS (F32, n_tok >= 16): the router's shape
                      MatmulCase{GgmlType::F32, 130, 2048, 4}, MatmulCase{GgmlType::F32, 130, 2048, 37},
                      MatmulCase{GgmlType::F16, 41, 1000, 4}, MatmulCase{GgmlType::BF16, 67, 96, 3}),
    [](const auto& i) {
      return std::string(gguf::type_name(i.param.type)) + "_" + std::to_string(i.param.rows) + "x" + std::to_string(i.param.cols) +
             "_tok" + std::to_string(i.param.n_tok);
    });

class CudaMoeMatmul : public ::testing::TestWithParam<GgmlType> {};

// Each (token, slot) against cpu::matmul with that expert's slice; tolerance as CudaMatmul.
TEST_P(CudaMoeMatmul, EachSlotMatchesCpuMatmulOfItsExpert) {
  DF_REQUIRE_GPU();
  const GgmlType type = GetParam();
  const int64_t n_expert = 6, rows = 40, cols = 128, n_tok = 3;
  const int n_used = 2;
  const HostMat w = random_mat(type, n_expert * rows, cols, 11);
  const std::vector<int32_t> ids = {5, 0, 2, 3, 0, 5};
  auto ctx = scalar_context();
  cuda::DeviceBuffer dw(w.bytes.size());
  dw.upload(w.bytes.data(), w.bytes.size());
  auto dids = cuda::to_device(ids);
  const model::Mat one{type, dw.as<uint8_t>(), cols, rows, w.row_bytes};
  for (bool per_slot : {false, true}) {
    const int64_t n_in = per_slot ? n_tok * n_used : n_tok;
    const auto x = random_floats(n_in * cols, per_slot ? 12 : 13);
    auto dx = cuda::to_device(x);
    cuda::DeviceBuffer dy(n_tok * n_used * rows * 4);
    cuda::DeviceBuffer scratch(std::max<uint64_t>(1, cuda::q8_scratch_bytes(type, cols, n_in)));
    cuda::moe_matmul({.w = one, .expert_stride = rows * w.row_bytes, .n_expert = int32_t(n_expert),
                      .ids = dids.as<int32_t>(), .n_tok = n_tok, .n_used = n_used, .x = dx.as<float>(),
                      .x_per_slot = per_slot, .y = dy.as<float>(), .scratch = scratch.as<uint8_t>()});
    auto got = download<float>(dy, n_tok * n_used * rows);
    for (int64_t v = 0; v < n_tok * n_used; ++v) {
      const float* xv = x.data() + (per_slot ? v : v / n_used) * cols;
      HostMat ew{type, rows, cols, w.row_bytes,
                 std::vector<uint8_t>(w.bytes.begin() + ids[v] * rows * w.row_bytes,
                                      w.bytes.begin() + (ids[v] + 1) * rows * w.row_bytes)};
      std::vector<float> want(rows);
      cpu::matmul(ctx, ew.mat(), xv, 1, want.data());
      for (int64_t r = 0; r < rows; ++r) {
        const double tol = 1.1 * sum_order_tolerance(cols, abs_dot(ew, r, xv));
        ASSERT_NEAR(got[v * rows + r], want[r], tol) << "slot " << v << " row " << r << " per_slot " << per_slot;
      }
    }
  }
}

// Grouped by expert (several tiles for the busy experts, none for an idle one): bit for bit the per-slot results.
TEST_P(CudaMoeMatmul, GroupedByExpertEqualsPerSlot) {
  DF_REQUIRE_GPU();
  const GgmlType type = GetParam();
  const int64_t n_expert = 7, rows = 45, cols = 96 * 2, n_tok = 37;
  const int n_used = 3;
  const HostMat w = random_mat(type, n_expert * rows, cols, 14);
  std::vector<int32_t> ids(n_tok * n_used);
  std::mt19937 rng(15);
  for (int64_t t = 0; t < n_tok; ++t) {
    // Distinct experts per token from 0..5 (expert 6 stays idle), skewed towards expert 0.
    std::vector<int32_t> pool = {0, 1, 2, 3, 4, 5};
    std::shuffle(pool.begin() + 1, pool.end(), rng);
    if (t % 3 == 0) std::swap(pool[0], pool[1]);
    for (int k = 0; k < n_used; ++k) ids[t * n_used + k] = pool[k];
  }
  cuda::DeviceBuffer dw(w.bytes.size());
  dw.upload(w.bytes.data(), w.bytes.size());
  auto dids = cuda::to_device(ids);
  const model::Mat one{type, dw.as<uint8_t>(), cols, rows, w.row_bytes};
  const int64_t n_slots = n_tok * n_used;
  cuda::DeviceBuffer order(n_slots * 4), tiles((1 + 3 * cuda::moe_max_tiles(n_slots, n_expert)) * 4);
  cuda::moe_plan({.ids = dids.as<int32_t>(), .n_slots = n_slots, .n_expert = int32_t(n_expert),
                  .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>()});
  // The plan: every slot once, grouped by expert in increasing order, tiles of at most 8 covering each group.
  auto ord = download<int32_t>(order, n_slots);
  auto til = download<int32_t>(tiles, 1 + 3 * cuda::moe_max_tiles(n_slots, n_expert));
  std::vector<int32_t> sorted = ord;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t v = 0; v < n_slots; ++v) ASSERT_EQ(sorted[v], v);
  int64_t covered = 0;
  for (int32_t i = 0; i < til[0]; ++i) {
    const int32_t e = til[1 + 3 * i], first = til[2 + 3 * i], cnt = til[3 + 3 * i];
    ASSERT_EQ(first, covered);
    ASSERT_TRUE(cnt >= 1 && cnt <= 8);
    for (int32_t j = 0; j < cnt; ++j) ASSERT_EQ(ids[ord[first + j]], e);
    covered += cnt;
  }
  ASSERT_EQ(covered, n_slots);
  for (bool per_slot : {false, true}) {
    const int64_t n_in = per_slot ? n_slots : n_tok;
    const auto x = random_floats(n_in * cols, per_slot ? 16 : 17);
    auto dx = cuda::to_device(x);
    cuda::DeviceBuffer want(n_slots * rows * 4), got(n_slots * rows * 4), gathered(n_slots * cols * 4);
    cuda::DeviceBuffer scratch(std::max<uint64_t>(1, cuda::q8_scratch_bytes(type, cols, n_slots)));
    cuda::moe_matmul({.w = one, .expert_stride = rows * w.row_bytes, .n_expert = int32_t(n_expert),
                      .ids = dids.as<int32_t>(), .n_tok = n_tok, .n_used = n_used, .x = dx.as<float>(),
                      .x_per_slot = per_slot, .y = want.as<float>(), .scratch = scratch.as<uint8_t>()});
    cuda::moe_matmul_grouped({.w = one, .expert_stride = rows * w.row_bytes, .n_expert = int32_t(n_expert),
                              .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>(), .n_slots = n_slots,
                              .n_used = n_used, .x = dx.as<float>(), .x_per_slot = per_slot,
                              .gathered = gathered.as<float>(), .y = got.as<float>(),
                              .scratch = scratch.as<uint8_t>()});
    EXPECT_EQ(download<float>(got, n_slots * rows), download<float>(want, n_slots * rows)) << "per_slot " << per_slot;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaMoeMatmul,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::F16, GgmlType::BF16,
                                           GgmlType::F32),
                         type_param_name);

// The square sum is in double on both sides; only a differently rounded double sum can move the scale by one ulp,
// so each output is within 3 ulp.
TEST(CudaKernels, RmsNormMatchesCpu) {
  DF_REQUIRE_GPU();
  // Rows a thread holds 4 or 16 elements of (to 1,024 and 4,096 columns), and longer rows looped over.
  for (int64_t cols : {64, 1024, 1056, 2048, 4000, 4096, 5000}) {
    const int64_t rows = 7;
    auto x = random_floats(rows * cols, 21, -4.0f, 4.0f);
    auto wt = random_floats(cols, 22, 0.5f, 1.5f);
    std::vector<float> want(rows * cols);
    for (int64_t r = 0; r < rows; ++r) cpu::rms_norm(x.data() + r * cols, wt.data(), cols, 1e-6f, want.data() + r * cols);
    auto dx = cuda::to_device(x);
    auto dwt = cuda::to_device(wt);
    // In place, as the qk-norm uses it.
    cuda::rms_norm({.x = dx.as<float>(), .weight = dwt.as<float>(), .y = dx.as<float>(), .n_rows = rows,
                    .cols = cols, .eps = 1e-6f});
    auto got = download<float>(dx, rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) ASSERT_TRUE(within_ulps(got[i], want[i], 3)) << i << " cols " << cols;
  }
}

// Same table, same separately rounded products: exact.
TEST(CudaKernels, RopeMatchesCpuForBothPairings) {
  DF_REQUIRE_GPU();
  const int n_heads = 3, head_dim = 64, n_rot = 48, n_tok = 4;
  const float base = 1e6f;
  const std::vector<int32_t> pos = {0, 1, 517, 4095};
  const auto table = cuda::rope_table(4096, n_rot, base);
  auto dtable = cuda::to_device(table);
  auto dpos = cuda::to_device(pos);
  for (auto style : {model::RopeStyle::kNormal, model::RopeStyle::kNeox}) {
    auto x = random_floats(n_tok * n_heads * head_dim, 31, -2.0f, 2.0f);
    auto want = x;
    for (int t = 0; t < n_tok; ++t)
      cpu::rope(want.data() + t * n_heads * head_dim, n_heads, head_dim, n_rot, pos[t], base, style);
    auto dx = cuda::to_device(x);
    cuda::rope({.x = dx.as<float>(), .n_tok = n_tok, .n_heads = n_heads, .head_dim = head_dim, .n_rot = n_rot,
                .pos = dpos.as<int32_t>(), .table = dtable.as<float>(), .n_pos = 4096, .style = style});
    auto got = download<float>(dx, x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], want[i]) << i << " neox " << (style == model::RopeStyle::kNeox);
  }
}

TEST(CudaKernels, StoreKvRoundsToF16AtThePositions) {
  DF_REQUIRE_GPU();
  const int64_t n_ctx = 16, dk = 24, dv = 40, n_tok = 3;
  const std::vector<int32_t> pos = {4, 5, 15};
  auto k = random_floats(n_tok * dk, 51), v = random_floats(n_tok * dv, 52);
  cuda::DeviceBuffer kc(n_ctx * dk * 2), vc(n_ctx * dv * 2);
  DF_CUDA_CHECK(cudaMemset(kc.data(), 0, kc.size()));
  DF_CUDA_CHECK(cudaMemset(vc.data(), 0, vc.size()));
  auto dk_ = cuda::to_device(k), dv_ = cuda::to_device(v), dpos = cuda::to_device(pos);
  cuda::store_kv({.k = dk_.as<float>(), .v = dv_.as<float>(), .k_cache = kc.as<uint16_t>(),
                  .v_cache = vc.as<uint16_t>(), .pos = dpos.as<int32_t>(), .n_tok = n_tok, .dim_k = dk, .dim_v = dv,
                  .n_ctx = n_ctx});
  auto gk = download<uint16_t>(kc, n_ctx * dk), gv = download<uint16_t>(vc, n_ctx * dv);
  std::vector<uint16_t> wk(n_ctx * dk, 0), wv(n_ctx * dv, 0);
  for (int64_t t = 0; t < n_tok; ++t) {
    cpu::scalar_kernels().to_f16(k.data() + t * dk, wk.data() + pos[t] * dk, dk);
    cpu::scalar_kernels().to_f16(v.data() + t * dv, wv.data() + pos[t] * dv, dv);
  }
  EXPECT_EQ(gk, wk);
  EXPECT_EQ(gv, wv);
}

// The device's expf and the CPU's exp differ by up to 3 ulp; with the add, divide and multiply: within 8 ulp.
TEST(CudaKernels, SwigluAndAddMatchCpu) {
  DF_REQUIRE_GPU();
  const int64_t n = 5000;
  auto g = random_floats(n, 61, -12.0f, 12.0f), u = random_floats(n, 62, -3.0f, 3.0f);
  std::vector<float> want(n);
  cpu::swiglu(g.data(), u.data(), n, want.data());
  auto dg = cuda::to_device(g), du = cuda::to_device(u);
  cuda::glu({.gate = dg.as<float>(), .up = du.as<float>(), .y = dg.as<float>(), .n = n});
  auto got = download<float>(dg, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(within_ulps(got[i], want[i], 8)) << i << " " << got[i] << " " << want[i];

  // The residual add: exact.
  auto dx = cuda::to_device(u);
  cuda::add({.x = dx.as<float>(), .y = dg.as<float>(), .n = n});
  auto sum = download<float>(dx, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], u[i] + got[i]) << i;
}

// gemma4's steps. GELU: the device's tanhf and libm's differ by an ulp or two before the result is rounded to f16,
// so a result may land on the neighbouring f16 (2^-11 relative) where the f32 value lies near a rounding boundary;
// at most 1% of them. The soft cap: tanhf's ulps, with the two products, within 8 ulp. The scales: exact.
TEST(CudaKernels, Gemma4StepsMatchCpu) {
  DF_REQUIRE_GPU();
  const int64_t rows = 5, cols = 1000, n = rows * cols, stride = 3 * cols;
  auto g = random_floats(n, 71, -12.0f, 12.0f), u = random_floats(n, 72, -3.0f, 3.0f);
  auto m = random_floats(rows * stride, 73, -2.0f, 2.0f);
  auto near = [](float got, float want, const char* what, int64_t i, int64_t& flips) {
    if (got == want) return;
    ++flips;
    ASSERT_LE(std::fabs(got - want), std::ldexp(std::fabs(want), -10) + 1e-30f) << what << " " << i;
  };
  {  // GeGLU
    std::vector<float> want(n);
    cpu::geglu(g.data(), u.data(), n, want.data());
    auto dg = cuda::to_device(g), du = cuda::to_device(u);
    cuda::glu({.gate = dg.as<float>(), .up = du.as<float>(), .y = dg.as<float>(), .n = n, .act = cuda::Glu::kGelu});
    auto got = download<float>(dg, n);
    int64_t flips = 0;
    for (int64_t i = 0; i < n; ++i) near(got[i], want[i], "geglu", i, flips);
    EXPECT_LE(flips, n / 100);
  }
  {  // GELU times a strided multiplier, and alone
    std::vector<float> want(n), alone(n);
    cpu::gelu(g.data(), n, alone.data());
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t i = 0; i < cols; ++i) want[t * cols + i] = alone[t * cols + i] * m[t * stride + cols + i];
    auto dg = cuda::to_device(g), dm = cuda::to_device(m);
    cuda::DeviceBuffer da(n * 4);
    cuda::gelu({.x = dg.as<float>(), .y = da.as<float>(), .n_rows = rows, .cols = cols});
    cuda::gelu({.x = dg.as<float>(), .m = dm.as<float>() + cols, .m_stride = stride, .y = dg.as<float>(),
                .n_rows = rows, .cols = cols});
    auto got = download<float>(dg, n), got_alone = download<float>(da, n);
    int64_t flips = 0;
    for (int64_t i = 0; i < n; ++i) near(got_alone[i], alone[i], "gelu", i, flips);
    for (int64_t i = 0; i < n; ++i) near(got[i], want[i], "gelu * m", i, flips);
    EXPECT_LE(flips, n / 50);
  }
  {  // the scale and the soft cap
    const float s = 0.37f, cap = 30.0f;
    auto x = random_floats(n, 74, -100.0f, 100.0f);
    auto dx = cuda::to_device(x);
    cuda::scale({.x = dx.as<float>(), .n = n, .s = s});
    auto scaled = download<float>(dx, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(scaled[i], x[i] * s) << i;
    cuda::softcap({.x = dx.as<float>(), .n = n, .cap = cap});
    auto capped = download<float>(dx, n);
    for (int64_t i = 0; i < n; ++i) {
      const float want = std::tanh(scaled[i] * (1.0f / cap)) * cap;
      ASSERT_TRUE(within_ulps(capped[i], want, 8)) << i << " " << capped[i] << " " << want;
    }
  }
  {  // the router input: norm without a weight, times 1 / sqrt(E), times router_scale (3 ulp, as RmsNormMatchesCpu)
    auto x = random_floats(n, 75, -4.0f, 4.0f), rs = random_floats(cols, 76, 0.5f, 1.5f);
    const float inv = 1.0f / std::sqrt(float(cols));
    std::vector<float> want(n);
    for (int64_t t = 0; t < rows; ++t) {
      cpu::rms_norm(x.data() + t * cols, nullptr, cols, 1e-6f, want.data() + t * cols);
      for (int64_t i = 0; i < cols; ++i) want[t * cols + i] = (want[t * cols + i] * inv) * rs[i];
    }
    auto dx = cuda::to_device(x), drs = cuda::to_device(rs);
    cuda::DeviceBuffer dy(n * 4);
    cuda::rms_norm({.x = dx.as<float>(), .weight = drs.as<float>(), .y = dy.as<float>(), .n_rows = rows,
                    .cols = cols, .eps = 1e-6f, .scale = inv});
    auto got = download<float>(dy, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(within_ulps(got[i], want[i], 3)) << i;
  }
  {  // a post-norm into the residual stream, then the layer's output scale: (x + norm(y) w) s, each step rounded
    auto x = random_floats(n, 79, -4.0f, 4.0f), y = random_floats(n, 80, -4.0f, 4.0f);
    auto w = random_floats(cols, 81, 0.5f, 1.5f);
    const std::vector<float> s_host = {0.625f};
    std::vector<float> want(n);
    for (int64_t t = 0; t < rows; ++t) {
      cpu::rms_norm(y.data() + t * cols, w.data(), cols, 1e-6f, want.data() + t * cols);
      for (int64_t i = 0; i < cols; ++i) want[t * cols + i] = (x[t * cols + i] + want[t * cols + i]) * 0.625f;
    }
    auto dx = cuda::to_device(x), dy = cuda::to_device(y), dw = cuda::to_device(w), ds = cuda::to_device(s_host);
    cuda::rms_norm({.x = dy.as<float>(), .weight = dw.as<float>(), .n_rows = rows, .cols = cols, .eps = 1e-6f,
                    .add_to = dx.as<float>(), .then_scale = ds.as<float>()});
    auto got = download<float>(dx, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(within_ulps(got[i], want[i], 4) || std::fabs(got[i] - want[i]) < 1e-6f) << i;
    EXPECT_EQ(download<float>(dy, n), y);  // the input is left alone
  }
  // The MoE block's three post-norms in one launch: the three launches' values bit for bit, at gemma4 26B-A4B's
  // width and past the fused kernel's (which takes the three launches).
  for (const int64_t w_cols : {int64_t(2816), int64_t(4100)}) {
    const int64_t nn = rows * w_cols;
    auto a = random_floats(nn, 82, -3.0f, 3.0f), b = random_floats(nn, 83, -5.0f, 5.0f);
    auto x = random_floats(nn, 84, -4.0f, 4.0f);
    auto wa = random_floats(w_cols, 85, 0.5f, 1.5f), wb = random_floats(w_cols, 86, 0.5f, 1.5f);
    auto w = random_floats(w_cols, 87, 0.5f, 1.5f);
    const std::vector<float> s_host = {0.625f};
    auto da = cuda::to_device(a), db = cuda::to_device(b), dx = cuda::to_device(x), dwa = cuda::to_device(wa);
    auto dwb = cuda::to_device(wb), dw = cuda::to_device(w), ds = cuda::to_device(s_host);
    auto da2 = cuda::to_device(a), dx2 = cuda::to_device(x);
    cuda::rms_norm({.x = da.as<float>(), .weight = dwa.as<float>(), .y = da.as<float>(), .n_rows = rows,
                    .cols = w_cols, .eps = 1e-6f});
    cuda::rms_norm({.x = db.as<float>(), .weight = dwb.as<float>(), .n_rows = rows, .cols = w_cols, .eps = 1e-6f,
                    .add_to = da.as<float>()});
    cuda::rms_norm({.x = da.as<float>(), .weight = dw.as<float>(), .n_rows = rows, .cols = w_cols, .eps = 1e-6f,
                    .add_to = dx.as<float>(), .then_scale = ds.as<float>()});
    cuda::moe_post_norms({.a = da2.as<float>(), .wa = dwa.as<float>(), .b = db.as<float>(), .wb = dwb.as<float>(),
                          .w = dw.as<float>(), .x = dx2.as<float>(), .then_scale = ds.as<float>(), .n_rows = rows,
                          .cols = w_cols, .eps = 1e-6f});
    const auto want = download<float>(dx, nn);
    EXPECT_EQ(download<float>(dx2, nn), want) << w_cols;
    EXPECT_NE(want, x);
  }
  {  // routing with each weight times its expert's scale: the same experts, each weight times the scale
    const int X = 16, K = 8, T = 3;
    const auto logits = random_floats(T * X, 77, -3.0f, 3.0f), sc = random_floats(X, 78, 0.5f, 2.0f);
    auto dl = cuda::to_device(logits), dsc = cuda::to_device(sc);
    cuda::DeviceBuffer i1(T * K * 4), w1(T * K * 4), i2(T * K * 4), w2(T * K * 4);
    cuda::route({.logits = dl.as<float>(), .n_tok = T, .n_expert = X, .n_used = K, .ids = i1.as<int32_t>(),
                 .weights = w1.as<float>()});
    cuda::route({.logits = dl.as<float>(), .n_tok = T, .n_expert = X, .n_used = K, .ids = i2.as<int32_t>(),
                 .weights = w2.as<float>(), .expert_scale = dsc.as<float>()});
    const auto ids = download<int32_t>(i1, T * K);
    const auto w = download<float>(w1, T * K);
    EXPECT_EQ(download<int32_t>(i2, T * K), ids);
    const auto ws = download<float>(w2, T * K);
    for (int v = 0; v < T * K; ++v) ASSERT_EQ(ws[v], w[v] * sc[ids[v]]) << v;
  }
}

// The CPU engine's routing (Forward::moe_ffn), restated: softmax, stable sort, renormalized top k.
void cpu_route(const float* logits, int n_expert, int n_used, bool norm, int32_t* ids, float* w) {
  std::vector<float> p(logits, logits + n_expert);
  cpu::softmax(p.data(), n_expert);
  std::vector<int32_t> order(n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  double sum = 0;
  for (int k = 0; k < n_used; ++k) sum += double(p[order[k]]);
  const float fsum = std::max(float(sum), 6.103515625e-5f);
  for (int k = 0; k < n_used; ++k) {
    ids[k] = order[k];
    w[k] = norm ? p[order[k]] / fsum : p[order[k]];
  }
}

// Ids exact (including a tie, which goes to the lower id); weights within 16 ulp (the two expf's differ by up to
// 3 ulp, carried through the softmax sum, its reciprocal and the renormalization).
TEST(CudaKernels, RouteSelectsTheCpuExpertsAndWeights) {
  DF_REQUIRE_GPU();
  for (auto [n_expert, n_used] : {std::pair{8, 2}, std::pair{128, 8}, std::pair{60, 4}, std::pair{1000, 32}}) {
    for (bool norm : {true, false}) {
      const int64_t n_tok = 5;
      auto logits = random_floats(n_tok * n_expert, 71 + n_expert, -4.0f, 4.0f);
      logits[3] = logits[5] = 9.0f;  // token 0: two equal best experts
      // token 1: all equal, so the selection is experts 0 .. n_used - 1; token 2: a tie across the cut
      std::fill(logits.begin() + n_expert, logits.begin() + 2 * n_expert, 0.5f);
      for (int i = 0; i < n_used + 1; ++i) logits[2 * n_expert + (n_expert - 1 - 2 * i % n_expert)] = 7.0f;
      std::vector<int32_t> wid(n_tok * n_used);
      std::vector<float> ww(n_tok * n_used);
      for (int64_t t = 0; t < n_tok; ++t)
        cpu_route(logits.data() + t * n_expert, n_expert, n_used, norm, wid.data() + t * n_used, ww.data() + t * n_used);
      auto dl = cuda::to_device(logits);
      cuda::DeviceBuffer did(wid.size() * 4), dw(ww.size() * 4);
      cuda::route({.logits = dl.as<float>(), .n_tok = n_tok, .n_expert = n_expert, .n_used = n_used,
                   .norm_topk = norm, .ids = did.as<int32_t>(), .weights = dw.as<float>()});
      auto gid = download<int32_t>(did, wid.size());
      auto gw = download<float>(dw, ww.size());
      EXPECT_EQ(gid, wid) << n_expert << "/" << n_used;
      EXPECT_EQ(gid[0], 3);
      for (size_t i = 0; i < ww.size(); ++i) ASSERT_TRUE(within_ulps(gw[i], ww[i], 16)) << i;
    }
  }
}

// The CPU's combine loop order and roundings: exact.
TEST(CudaKernels, MoeCombineMatchesCpuOrder) {
  DF_REQUIRE_GPU();
  const int64_t n_tok = 3, E = 300;
  const int K = 4;
  auto eo = random_floats(n_tok * K * E, 81), w = random_floats(n_tok * K, 82, 0.0f, 1.0f);
  std::vector<float> want(n_tok * E);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int k = 0; k < K; ++k)
      for (int64_t i = 0; i < E; ++i) {
        const float v = eo[(t * K + k) * E + i] * w[t * K + k];
        want[t * E + i] = k == 0 ? v : want[t * E + i] + v;
      }
  auto deo = cuda::to_device(eo), dw = cuda::to_device(w);
  cuda::DeviceBuffer dout(want.size() * 4);
  cuda::moe_combine({.expert_out = deo.as<float>(), .weights = dw.as<float>(), .out = dout.as<float>(),
                     .n_tok = n_tok, .n_embd = E, .n_used = K});
  EXPECT_EQ(download<float>(dout, want.size()), want);
}

// A decode step's CPU rows and weights stay in pinned host memory, and the combine adds them into the residual stream
// in its one launch: x + the sum, rounded as moe_combine into a buffer and then add would round.
TEST(CudaKernels, MoeCombineAddsPinnedHostRowsIntoOut) {
  DF_REQUIRE_GPU();
  const int64_t n_tok = 2, E = 300;
  const int K = 3;
  auto eo = random_floats(n_tok * K * E, 83), w = random_floats(n_tok * K, 84, 0.0f, 1.0f);
  auto x = random_floats(n_tok * E, 85);
  auto host = [](std::span<const float> v) {
    auto b = io::AlignedBuffer::allocate(v.size() * 4, 64, cuda::pinned_host_allocator());
    EXPECT_TRUE(b.ok());
    std::memcpy(b->data(), v.data(), v.size() * 4);
    return std::move(*b);
  };
  io::AlignedBuffer heo = host(eo), hw = host(w);
  auto deo = cuda::to_device(eo), dw = cuda::to_device(w), dx = cuda::to_device(x);
  cuda::DeviceBuffer sum(x.size() * 4);
  cuda::moe_combine({.expert_out = deo.as<float>(), .weights = dw.as<float>(), .out = sum.as<float>(),
                     .n_tok = n_tok, .n_embd = E, .n_used = K});
  cuda::add({.x = dx.as<float>(), .y = sum.as<float>(), .n = n_tok * E});
  const std::vector<float> want = download<float>(dx, x.size());
  auto dout = cuda::to_device(x);
  cuda::moe_combine({.expert_out = reinterpret_cast<const float*>(heo.data()),
                     .weights = reinterpret_cast<const float*>(hw.data()), .out = dout.as<float>(), .n_tok = n_tok,
                     .n_embd = E, .n_used = K, .accumulate = true});
  EXPECT_EQ(download<float>(dout, x.size()), want);
}

// Spans of any length (none, one word, more than the launch's blocks cover in one pass) between device and pinned
// host memory, in both directions, each landing whole and alone.
TEST(CudaKernels, CopySpansCopiesEachSpanWhole) {
  DF_REQUIRE_GPU();
  const int64_t lens[4] = {1, 0, 70000, 2048}, kStride = 70001;  // a word past each span stays
  std::vector<std::vector<float>> src;
  std::vector<cuda::DeviceBuffer> dev;
  for (int i = 0; i < 4; ++i) {
    src.push_back(random_floats(std::max<int64_t>(lens[i], 1), 90 + i));
    dev.push_back(cuda::to_device(src.back()));
  }
  auto pinned = io::AlignedBuffer::allocate(4 * kStride * 4, 64, cuda::pinned_host_allocator());
  ASSERT_TRUE(pinned.ok());
  float* h = reinterpret_cast<float*>(pinned->data());
  std::fill_n(h, 4 * kStride, -1.0f);
  cuda::CopySpansArgs to_host;
  for (int i = 0; i < 4; ++i) to_host.spans[i] = {dev[size_t(i)].as<float>(), h + i * kStride, lens[i] * 4};
  cuda::copy_spans(to_host);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::equal(src[size_t(i)].begin(), src[size_t(i)].begin() + lens[i], h + i * kStride)) << "span " << i;
    EXPECT_EQ(h[i * kStride + lens[i]], -1.0f) << "past span " << i;
  }
  // Back: host to device, into zeroed buffers.
  cuda::CopySpansArgs to_dev;
  std::vector<cuda::DeviceBuffer> back;
  for (int i = 0; i < 4; ++i) {
    back.push_back(cuda::to_device(std::vector<float>(size_t(lens[i] + 1), 0.0f)));
    to_dev.spans[i] = {h + i * kStride, back.back().as<float>(), lens[i] * 4};
  }
  cuda::copy_spans(to_dev);
  for (int i = 0; i < 4; ++i) {
    const std::vector<float> got = download<float>(back[size_t(i)], size_t(lens[i] + 1));
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + lens[i], src[size_t(i)].begin())) << "span " << i;
    EXPECT_EQ(got[size_t(lens[i])], 0.0f) << "past span " << i;
  }
}

class CudaGetRows : public ::testing::TestWithParam<GgmlType> {};

// Dequantization is exact.
TEST_P(CudaGetRows, MatchCpuGetRow) {
  DF_REQUIRE_GPU();
  const HostMat table = random_mat(GetParam(), 50, 320, 91);
  const std::vector<int32_t> ids = {49, 0, 7, 7};
  std::vector<float> want(ids.size() * table.cols);
  for (size_t i = 0; i < ids.size(); ++i) cpu::get_row(table.mat(), ids[i], want.data() + i * table.cols);
  cuda::DeviceBuffer dt(table.bytes.size());
  dt.upload(table.bytes.data(), table.bytes.size());
  auto did = cuda::to_device(ids);
  cuda::DeviceBuffer dout(want.size() * 4);
  cuda::get_rows({.table = dmat(table, dt), .ids = did.as<int32_t>(), .n = int64_t(ids.size()),
                  .out = dout.as<float>()});
  EXPECT_EQ(download<float>(dout, want.size()), want);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaGetRows,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::F16, GgmlType::BF16,
                                           GgmlType::F32),
                         type_param_name);

// The first index of the maximum, as the CPU sampler's argmax.
TEST(CudaKernels, ArgmaxTakesTheFirstMaximum) {
  DF_REQUIRE_GPU();
  const int64_t n = 151936, rows = 3;
  auto x = random_floats(rows * n, 101, -10.0f, 10.0f);
  x[70000] = x[90000] = 50.0f;          // row 0: a tie
  x[n + n - 1] = 60.0f;                 // row 1: the last element
  x[2 * n + 0] = 70.0f;                 // row 2: the first element
  auto dx = cuda::to_device(x);
  cuda::DeviceBuffer dout(rows * 4);
  cuda::argmax({.x = dx.as<float>(), .n_rows = rows, .n = n, .out = dout.as<int32_t>()});
  auto got = download<int32_t>(dout, rows);
  EXPECT_EQ(got, (std::vector<int32_t>{70000, int32_t(n - 1), 0}));
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(got[r], std::max_element(x.begin() + r * n, x.begin() + (r + 1) * n) - (x.begin() + r * n));
}

}  // namespace
}  // namespace df::test
