// The fused decode kernels (decode.cu) against the unfused kernels they replace, and through them the CPU
// reference: each fused kernel repeats the same operations in the same order, so every comparison is bit for bit.
// Throughput at the shapes of a Qwen3-30B-A3B decode step is printed (GB/s of weights read), never asserted.
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

cuda::DeviceBuffer upload(const HostMat& m) {
  cuda::DeviceBuffer d(m.bytes.size());
  d.upload(m.bytes.data(), m.bytes.size());
  return d;
}

// Bit patterns, so that NaNs would compare equal to themselves and -0 differ from +0.
template <typename T>
size_t count_differ(const std::vector<T>& a, const std::vector<T>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return n;
}

struct MvCase {
  GgmlType type;
  int64_t rows, cols, n_tok;
};
class DecodeMatvec : public ::testing::TestWithParam<MvCase> {};

// Against matmul's tiled kernel (taken for 5 tokens; each token's results do not depend on the others), for
// activations pre-quantized and quantized inside the kernel; then three parts in one launch, one of them adding
// into a residual in place, against three products and an add. And the first token's rows against the CPU.
TEST_P(DecodeMatvec, EqualsTheTiledKernelBitForBit) {
  DF_REQUIRE_GPU();
  const auto c = GetParam();
  const int64_t n_ref = 5;  // > kDecodeMaxTok: matmul's tiled kernel
  const HostMat w = random_mat(c.type, c.rows, c.cols, 201);
  auto dw = upload(w);
  const model::Mat m = dmat(w, dw);
  ASSERT_TRUE(cuda::decode_matvec_supported(m, c.n_tok));
  ASSERT_FALSE(cuda::decode_matvec_supported(m, n_ref));
  const auto x = random_floats(n_ref * c.cols, 202, -2.0f, 2.0f);
  auto dx = cuda::to_device(x);
  cuda::DeviceBuffer scratch(cuda::q8_scratch_bytes(c.type, c.cols, n_ref)), want(n_ref * c.rows * 4);
  cuda::matmul({.w = m, .x = dx.as<float>(), .n_tok = n_ref, .y = want.as<float>(), .scratch = scratch.as<uint8_t>()});
  auto ref = download<float>(want, n_ref * c.rows);
  ref.resize(c.n_tok * c.rows);  // [token][row]: the first n_tok tokens

  cuda::DeviceBuffer got(c.n_tok * c.rows * 4), got2(c.n_tok * c.rows * 4);
  cuda::DecodeMatvecArgs a{.n_parts = 1, .x = dx.as<float>(), .x_q8 = scratch.as<uint8_t>(), .n_tok = c.n_tok};
  a.parts[0] = {.w = m, .y = got.as<float>()};
  cuda::decode_matvec(a);
  EXPECT_EQ(count_differ(download<float>(got, ref.size()), ref), 0u) << "pre-quantized activations";
  a.x_q8 = nullptr;
  a.parts[0].y = got2.as<float>();
  cuda::decode_matvec(a);
  EXPECT_EQ(count_differ(download<float>(got2, ref.size()), ref), 0u) << "activations quantized in the kernel";

  // matmul routes these shapes to the decode kernel itself.
  cuda::DeviceBuffer via(c.n_tok * c.rows * 4);
  cuda::matmul({.w = m, .x = dx.as<float>(), .n_tok = c.n_tok, .y = via.as<float>(), .scratch = scratch.as<uint8_t>()});
  EXPECT_EQ(count_differ(download<float>(via, ref.size()), ref), 0u) << "matmul";

  // Normed in each block (x as the residual stream, a norm weight): rms_norm_q8, then the pre-quantized launch.
  const auto nw = random_floats(c.cols, 205, 0.5f, 1.5f);
  auto dnw = cuda::to_device(nw);
  cuda::DeviceBuffer xn(c.n_tok * c.cols * 4), xq(cuda::q8_scratch_bytes(GgmlType::Q8_0, c.cols, c.n_tok));
  cuda::DeviceBuffer want_n(c.n_tok * c.rows * 4), got_n(c.n_tok * c.rows * 4);
  cuda::rms_norm_q8({.x = dx.as<float>(), .weight = dnw.as<float>(), .y = xn.as<float>(), .y_q8 = xq.as<uint8_t>(),
                     .n_rows = c.n_tok, .cols = c.cols, .eps = 1e-6f});
  cuda::DecodeMatvecArgs e{.n_parts = 1, .x_q8 = xq.as<uint8_t>(), .n_tok = c.n_tok};
  e.parts[0] = {.w = m, .y = want_n.as<float>()};
  cuda::decode_matvec(e);
  cuda::DecodeMatvecArgs f{.n_parts = 1, .x = dx.as<float>(), .n_tok = c.n_tok, .norm = dnw.as<float>(), .eps = 1e-6f};
  f.parts[0] = {.w = m, .y = got_n.as<float>()};
  cuda::decode_matvec(f);
  EXPECT_EQ(count_differ(download<float>(got_n, ref.size()), download<float>(want_n, ref.size())), 0u)
      << "normed in the kernel";

  // Three parts: w, a second matrix with a residual added in place, and w again.
  const HostMat w2 = random_mat(c.type, c.rows + 9, c.cols, 203);
  auto dw2 = upload(w2);
  const model::Mat m2 = dmat(w2, dw2);
  cuda::DeviceBuffer want2(n_ref * m2.rows * 4);
  cuda::matmul(
      {.w = m2, .x = dx.as<float>(), .n_tok = n_ref, .y = want2.as<float>(), .scratch = scratch.as<uint8_t>()});
  auto ref2 = download<float>(want2, n_ref * m2.rows);
  ref2.resize(c.n_tok * m2.rows);
  const auto res = random_floats(c.n_tok * m2.rows, 204, -5.0f, 5.0f);
  auto dres = cuda::to_device(res);
  cuda::quantize_q8_0({.x = dx.as<float>(), .y = scratch.as<uint8_t>(), .n_rows = c.n_tok, .cols = c.cols});
  cuda::DeviceBuffer p0(c.n_tok * c.rows * 4), p2(c.n_tok * c.rows * 4);
  cuda::DecodeMatvecArgs b{.n_parts = 3, .x = dx.as<float>(), .x_q8 = scratch.as<uint8_t>(), .n_tok = c.n_tok};
  b.parts[0] = {.w = m, .y = p0.as<float>()};
  b.parts[1] = {.w = m2, .y = dres.as<float>(), .residual = dres.as<float>()};
  b.parts[2] = {.w = m, .y = p2.as<float>()};
  cuda::decode_matvec(b);
  std::vector<float> want_res(res.size());
  for (size_t i = 0; i < res.size(); ++i) want_res[i] = res[i] + ref2[i];  // add_kernel: one rounded f32 add
  EXPECT_EQ(count_differ(download<float>(p0, ref.size()), ref), 0u) << "part 0";
  EXPECT_EQ(count_differ(download<float>(dres, res.size()), want_res), 0u) << "part 1 with the residual";
  EXPECT_EQ(count_differ(download<float>(p2, ref.size()), ref), 0u) << "part 2";

  // The CPU reference, within the f32 summation-order bound (as CudaMatmul); the CPU quantizes the other types'
  // activations differently (Q8_K, Q8_1), and kquant_test.cpp holds those against the dequantized rows.
  if (c.type != GgmlType::Q4_0 && c.type != GgmlType::Q8_0) return;
  auto ctx = scalar_context();
  std::vector<float> cpu_y(c.rows);
  cpu::matmul(ctx, w.mat(), x.data(), 1, cpu_y.data());
  for (int64_t r = 0; r < c.rows; ++r)
    ASSERT_NEAR(ref[r], cpu_y[r], 1.1 * sum_order_tolerance(c.cols, abs_dot(w, r, x.data()))) << "row " << r;
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeMatvec,
                         ::testing::Values(MvCase{GgmlType::Q4_0, 67, 512, 1}, MvCase{GgmlType::Q4_0, 130, 2048, 1},
                                           MvCase{GgmlType::Q4_0, 61, 256, 3}, MvCase{GgmlType::Q4_0, 67, 4096, 2},
                                           MvCase{GgmlType::Q8_0, 67, 512, 1},
                                           MvCase{GgmlType::Q8_0, 33, 1024, 4}, MvCase{GgmlType::Q8_0, 130, 2048, 2},
                                           MvCase{GgmlType::Q4_K, 67, 512, 1}, MvCase{GgmlType::Q4_K, 130, 2048, 4},
                                           MvCase{GgmlType::Q5_K, 130, 2048, 1}, MvCase{GgmlType::Q6_K, 61, 256, 3},
                                           MvCase{GgmlType::Q6_K, 67, 2048, 1}, MvCase{GgmlType::Q3_K, 33, 1024, 4},
                                           MvCase{GgmlType::Q2_K, 67, 512, 2}, MvCase{GgmlType::IQ4_XS, 67, 512, 1},
                                           MvCase{GgmlType::IQ4_NL, 33, 1024, 3}, MvCase{GgmlType::Q4_1, 67, 512, 1},
                                           MvCase{GgmlType::Q5_0, 67, 512, 2}, MvCase{GgmlType::Q5_1, 67, 96, 4}),
                         [](const auto& i) {
                           return std::string(gguf::type_name(i.param.type)) + "_" + std::to_string(i.param.rows) +
                                  "x" + std::to_string(i.param.cols) + "_tok" + std::to_string(i.param.n_tok);
                         });

// Rows whose start is not 16-byte aligned are left to the tiled kernel.
TEST(DecodeKernels, UnalignedRowsAreNotTaken) {
  DF_REQUIRE_GPU();
  const HostMat w = random_mat(GgmlType::Q4_0, 8, 96, 205);  // 3 blocks: 54-byte rows
  auto dw = upload(w);
  EXPECT_FALSE(cuda::decode_matvec_supported(dmat(w, dw), 1));
  const HostMat f = random_mat(GgmlType::F16, 8, 256, 206);
  auto df = upload(f);
  EXPECT_FALSE(cuda::decode_matvec_supported(dmat(f, df), 1));
}

// A gated input (the feed-forward's down projection of act(gate) * up, a per-layer input's projection of gelu(g) times
// a strided row) applied inside decode_matvec's quantization and inside quantize_q8_0: bit for bit the activation's
// own kernel followed by the plain product.
TEST(DecodeKernels, GatedInputEqualsTheActivationThenTheProduct) {
  DF_REQUIRE_GPU();
  for (auto act : {cuda::Glu::kSilu, cuda::Glu::kGelu})
    for (int64_t n_tok : {1, 3}) {
      const int64_t cols = 256, rows = 64, stride = 3 * cols;  // the multiplier's rows: every third slice of 256
      const HostMat w = random_mat(GgmlType::Q4_0, rows, cols, 231);
      auto dw = upload(w);
      auto g = random_floats(n_tok * cols, 232, -12.0f, 12.0f), m = random_floats(n_tok * stride, 233, -2.0f, 2.0f);
      auto dg = cuda::to_device(g), dm = cuda::to_device(m);
      const float* mul = dm.as<float>() + cols;
      // The reference: the activation's kernel into its own buffer (a strided multiplier: gelu()'s), then the product.
      cuda::DeviceBuffer a(n_tok * cols * 4), y1(n_tok * rows * 4), y2(n_tok * rows * 4), y3(n_tok * rows * 4);
      if (act == cuda::Glu::kGelu) {
        cuda::gelu({.x = dg.as<float>(), .m = mul, .m_stride = stride, .y = a.as<float>(), .n_rows = n_tok,
                    .cols = cols});
      } else {
        std::vector<float> packed(n_tok * cols);  // glu() takes the multiplier contiguous
        for (int64_t t = 0; t < n_tok; ++t)
          std::copy_n(m.begin() + t * stride + cols, cols, packed.begin() + t * cols);
        auto dp = cuda::to_device(packed);
        cuda::glu({.gate = dg.as<float>(), .up = dp.as<float>(), .y = a.as<float>(), .n = n_tok * cols});
      }
      cuda::DecodeMatvecArgs ref{.x = a.as<float>(), .n_tok = n_tok};
      ref.parts[0] = {.w = dmat(w, dw), .y = y1.as<float>()};
      cuda::decode_matvec(ref);
      const cuda::InputGate gate{.on = true, .act = act, .mul = mul, .mul_stride = stride};
      cuda::DecodeMatvecArgs fused{.x = dg.as<float>(), .n_tok = n_tok, .gate = gate};
      fused.parts[0] = {.w = dmat(w, dw), .y = y2.as<float>()};
      cuda::decode_matvec(fused);
      const uint64_t qb = cuda::q8_scratch_bytes(GgmlType::Q8_0, cols, n_tok);
      cuda::DeviceBuffer q(qb);
      cuda::quantize_q8_0({.x = dg.as<float>(), .y = q.as<uint8_t>(), .n_rows = n_tok, .cols = cols, .gate = gate});
      cuda::DecodeMatvecArgs pre{.x_q8 = q.as<uint8_t>(), .n_tok = n_tok};
      pre.parts[0] = {.w = dmat(w, dw), .y = y3.as<float>()};
      cuda::decode_matvec(pre);
      const auto want = download<float>(y1, n_tok * rows);
      const std::string what = std::string(act == cuda::Glu::kGelu ? "gelu" : "silu") + " n_tok " +
                               std::to_string(n_tok);
      EXPECT_EQ(count_differ(download<float>(y2, n_tok * rows), want), 0u) << what;
      EXPECT_EQ(count_differ(download<float>(y3, n_tok * rows), want), 0u) << what;
    }
}

// rms_norm then quantize_q8_0, fused: both outputs bit for bit.
TEST(DecodeKernels, RmsNormQ8EqualsNormThenQuantize) {
  DF_REQUIRE_GPU();
  for (int64_t cols : {64, 2048, 4096}) {
    const int64_t rows = 3;
    auto x = random_floats(rows * cols, 211, -4.0f, 4.0f);
    std::fill_n(x.begin() + 32, 32, 0.0f);  // an all-zero block
    auto wt = random_floats(cols, 212, 0.5f, 1.5f);
    auto dx = cuda::to_device(x), dwt = cuda::to_device(wt);
    const uint64_t qb = cuda::q8_scratch_bytes(GgmlType::Q8_0, cols, rows);
    cuda::DeviceBuffer y1(rows * cols * 4), q1(qb), y2(rows * cols * 4), q2(qb);
    cuda::rms_norm({.x = dx.as<float>(), .weight = dwt.as<float>(), .y = y1.as<float>(), .n_rows = rows, .cols = cols,
                    .eps = 1e-6f});
    cuda::quantize_q8_0({.x = y1.as<float>(), .y = q1.as<uint8_t>(), .n_rows = rows, .cols = cols});
    cuda::rms_norm_q8({.x = dx.as<float>(), .weight = dwt.as<float>(), .y = y2.as<float>(), .y_q8 = q2.as<uint8_t>(),
                       .n_rows = rows, .cols = cols, .eps = 1e-6f});
    EXPECT_EQ(count_differ(download<float>(y2, rows * cols), download<float>(y1, rows * cols)), 0u) << cols;
    EXPECT_EQ(download<uint8_t>(q2, qb), download<uint8_t>(q1, qb)) << cols;
    // Without the f32 output: the same blocks.
    DF_CUDA_CHECK(cudaMemset(q2.data(), 0, qb));
    cuda::rms_norm_q8({.x = dx.as<float>(), .weight = dwt.as<float>(), .y_q8 = q2.as<uint8_t>(), .n_rows = rows,
                       .cols = cols, .eps = 1e-6f});
    EXPECT_EQ(download<uint8_t>(q2, qb), download<uint8_t>(q1, qb)) << cols;
  }
}

// The router with its norm inside: the logits of rms_norm then the router's matmul, and the normed rows and their
// Q8_0 blocks as rms_norm_q8 writes them, bit for bit.
TEST(DecodeKernels, NormedRouterEqualsNormThenRouter) {
  DF_REQUIRE_GPU();
  for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
    for (int64_t n_tok : {int64_t(1), int64_t(3)}) {
      const int64_t X = 128, E = 2048;
      const HostMat w = random_mat(type, X, E, 221);
      auto dw = upload(w);
      const model::Mat m = dmat(w, dw);
      ASSERT_TRUE(cuda::normed_router_supported(m, n_tok));
      const auto x = random_floats(n_tok * E, 222, -3.0f, 3.0f);
      const auto nw = random_floats(E, 223, 0.5f, 1.5f);
      auto dx = cuda::to_device(x), dnw = cuda::to_device(nw);
      const uint64_t qb = cuda::q8_scratch_bytes(GgmlType::Q8_0, E, n_tok);
      cuda::DeviceBuffer y1(n_tok * E * 4), q1(qb), l1(n_tok * X * 4), y2(n_tok * E * 4), q2(qb), l2(n_tok * X * 4);
      cuda::rms_norm_q8({.x = dx.as<float>(), .weight = dnw.as<float>(), .y = y1.as<float>(), .y_q8 = q1.as<uint8_t>(),
                         .n_rows = n_tok, .cols = E, .eps = 1e-6f});
      cuda::matmul({.w = m, .x = y1.as<float>(), .n_tok = n_tok, .y = l1.as<float>()});
      cuda::normed_router({.w = m, .x = dx.as<float>(), .norm = dnw.as<float>(), .eps = 1e-6f, .n_tok = n_tok,
                           .y = l2.as<float>(), .xn = y2.as<float>(), .xq = q2.as<uint8_t>()});
      const std::string what = std::string(gguf::type_name(type)) + ", " + std::to_string(n_tok) + " tokens";
      EXPECT_EQ(count_differ(download<float>(l2, n_tok * X), download<float>(l1, n_tok * X)), 0u) << what;
      EXPECT_EQ(count_differ(download<float>(y2, n_tok * E), download<float>(y1, n_tok * E)), 0u) << what;
      EXPECT_EQ(download<uint8_t>(q2, qb), download<uint8_t>(q1, qb)) << what;
    }
  }
}

struct QkCase {
  int n_head, n_head_kv, hk, hv, n_rot;
  int64_t n_tok;
  bool norm;
  bool v_norm = false;  // gemma4: each value head RMS-normed without a weight
};
class DecodeQkRope : public ::testing::TestWithParam<QkCase> {};

// Against rms_norm (per head, in place), rope of q and k and store_kv: q, k and both caches bit for bit; and the
// queries alone (k null: a layer that reads another layer's cache) as the same q.
TEST_P(DecodeQkRope, EqualsNormRopeAndStore) {
  DF_REQUIRE_GPU();
  const auto c = GetParam();
  const int64_t n_ctx = 64, kd = int64_t(c.n_head_kv) * c.hk, vd = int64_t(c.n_head_kv) * c.hv;
  const std::vector<int32_t> all_pos = {0, 17, 63, 5};
  const std::vector<int32_t> pos(all_pos.begin(), all_pos.begin() + c.n_tok);
  const auto table = cuda::rope_table(n_ctx, c.n_rot, 1e6f);
  auto dtable = cuda::to_device(table), dpos = cuda::to_device(pos);
  const auto q = random_floats(c.n_tok * c.n_head * c.hk, 221, -3.0f, 3.0f);
  const auto k = random_floats(c.n_tok * kd, 222, -3.0f, 3.0f);
  const auto v = random_floats(c.n_tok * vd, 223, -3.0f, 3.0f);
  const auto qn = random_floats(c.hk, 224, 0.5f, 1.5f), kn = random_floats(c.hk, 225, 0.5f, 1.5f);
  auto dqn = cuda::to_device(qn), dkn = cuda::to_device(kn), dv = cuda::to_device(v);
  for (auto style : {model::RopeStyle::kNormal, model::RopeStyle::kNeox}) {
    auto q1 = cuda::to_device(q), k1 = cuda::to_device(k), q2 = cuda::to_device(q), k2 = cuda::to_device(k);
    cuda::DeviceBuffer kc1(n_ctx * kd * 2), vc1(n_ctx * vd * 2), kc2(n_ctx * kd * 2), vc2(n_ctx * vd * 2);
    for (auto* b : {&kc1, &vc1, &kc2, &vc2}) DF_CUDA_CHECK(cudaMemset(b->data(), 0, b->size()));
    if (c.norm) {
      cuda::rms_norm({.x = q1.as<float>(), .weight = dqn.as<float>(), .y = q1.as<float>(),
                      .n_rows = c.n_tok * c.n_head, .cols = c.hk, .eps = 1e-6f});
      cuda::rms_norm({.x = k1.as<float>(), .weight = dkn.as<float>(), .y = k1.as<float>(),
                      .n_rows = c.n_tok * c.n_head_kv, .cols = c.hk, .eps = 1e-6f});
    }
    cuda::rope({.x = q1.as<float>(), .n_tok = c.n_tok, .n_heads = c.n_head, .head_dim = c.hk, .n_rot = c.n_rot,
                .pos = dpos.as<int32_t>(), .table = dtable.as<float>(), .n_pos = n_ctx, .style = style});
    cuda::rope({.x = k1.as<float>(), .n_tok = c.n_tok, .n_heads = c.n_head_kv, .head_dim = c.hk, .n_rot = c.n_rot,
                .pos = dpos.as<int32_t>(), .table = dtable.as<float>(), .n_pos = n_ctx, .style = style});
    auto vn = cuda::to_device(v);
    if (c.v_norm)
      cuda::rms_norm({.x = vn.as<float>(), .y = vn.as<float>(), .n_rows = c.n_tok * c.n_head_kv, .cols = c.hv,
                      .eps = 1e-6f});
    cuda::store_kv({.k = k1.as<float>(), .v = vn.as<float>(), .k_cache = kc1.as<uint16_t>(),
                    .v_cache = vc1.as<uint16_t>(), .pos = dpos.as<int32_t>(), .n_tok = c.n_tok, .dim_k = kd,
                    .dim_v = vd, .n_ctx = n_ctx});
    cuda::qk_norm_rope_store({.q = q2.as<float>(), .k = k2.as<float>(), .v = dv.as<float>(),
                              .q_norm = c.norm ? dqn.as<float>() : nullptr,
                              .k_norm = c.norm ? dkn.as<float>() : nullptr, .eps = 1e-6f, .n_head = c.n_head,
                              .n_head_kv = c.n_head_kv, .head_dim_k = c.hk, .head_dim_v = c.hv, .n_rot = c.n_rot,
                              .n_tok = c.n_tok, .pos = dpos.as<int32_t>(), .table = dtable.as<float>(),
                              .n_pos = n_ctx, .style = style, .k_cache = kc2.as<uint16_t>(),
                              .v_cache = vc2.as<uint16_t>(), .n_ctx = n_ctx, .v_norm = c.v_norm});
    auto q3 = cuda::to_device(q);
    cuda::qk_norm_rope_store({.q = q3.as<float>(), .q_norm = c.norm ? dqn.as<float>() : nullptr, .eps = 1e-6f,
                              .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim_k = c.hk, .head_dim_v = c.hv,
                              .n_rot = c.n_rot, .n_tok = c.n_tok, .pos = dpos.as<int32_t>(),
                              .table = dtable.as<float>(), .n_pos = n_ctx, .style = style, .n_ctx = n_ctx});
    const bool neox = style == model::RopeStyle::kNeox;
    EXPECT_EQ(count_differ(download<float>(q3, q.size()), download<float>(q1, q.size())), 0u) << "q only, neox " << neox;
    EXPECT_EQ(count_differ(download<float>(q2, q.size()), download<float>(q1, q.size())), 0u) << "q neox " << neox;
    EXPECT_EQ(count_differ(download<float>(k2, k.size()), download<float>(k1, k.size())), 0u) << "k neox " << neox;
    EXPECT_EQ(download<uint16_t>(kc2, n_ctx * kd), download<uint16_t>(kc1, n_ctx * kd)) << "k cache neox " << neox;
    EXPECT_EQ(download<uint16_t>(vc2, n_ctx * vd), download<uint16_t>(vc1, n_ctx * vd)) << "v cache neox " << neox;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeQkRope,
                         ::testing::Values(QkCase{32, 4, 128, 128, 128, 1, true}, QkCase{6, 2, 64, 64, 48, 3, true},
                                           QkCase{4, 4, 96, 80, 96, 4, false},
                                           QkCase{16, 2, 512, 512, 512, 2, true, true},
                                           QkCase{16, 8, 256, 256, 256, 3, true, true}),
                         [](const auto& i) {
                           const QkCase& c = i.param;
                           return "h" + std::to_string(c.n_head) + "kv" + std::to_string(c.n_head_kv) + "_d" +
                                  std::to_string(c.hk) + "v" + std::to_string(c.hv) + "_tok" +
                                  std::to_string(c.n_tok) + (c.norm ? "_norm" : "_nonorm");
                         });

// The routed experts of a few tokens: moe_decode_gate_up + moe_decode_down against moe_matmul (gate, up), swiglu,
// quantize (inside moe_matmul), moe_matmul (down), moe_combine and add, bit for bit.
struct MoeReference {
  std::vector<float> act;  // [n_tok * K][F] swiglu output
  std::vector<float> out;  // [n_tok][E] x + combine
  std::vector<float> sum;  // [n_tok][E] combine alone
};

MoeReference unfused_moe(const model::Mat& g, const model::Mat& u, const model::Mat& d, uint64_t gs, uint64_t us,
                         uint64_t ds, int32_t X, const cuda::DeviceBuffer& ids, const cuda::DeviceBuffer& wts,
                         const cuda::DeviceBuffer& xn, const std::vector<float>& x, int64_t n_tok, int K) {
  const int64_t F = g.rows, E = g.cols, n_slots = n_tok * K;
  cuda::DeviceBuffer gate(n_slots * F * 4), up(n_slots * F * 4), eo(n_slots * E * 4), comb(n_tok * E * 4);
  cuda::DeviceBuffer scratch(cuda::q8_scratch_bytes(g.type, std::max(E, F), n_slots));
  const cuda::MoeMatmulArgs base{.n_expert = X, .ids = ids.as<int32_t>(), .n_tok = n_tok, .n_used = K,
                                 .scratch = scratch.as<uint8_t>()};
  cuda::MoeMatmulArgs ga = base, ua = base, da = base;
  ga.w = g, ga.expert_stride = gs, ga.x = xn.as<float>(), ga.y = gate.as<float>();
  ua.w = u, ua.expert_stride = us, ua.x = xn.as<float>(), ua.y = up.as<float>();
  cuda::moe_matmul(ga);
  cuda::moe_matmul(ua);
  cuda::glu({.gate = gate.as<float>(), .up = up.as<float>(), .y = gate.as<float>(), .n = n_slots * F});
  da.w = d, da.expert_stride = ds, da.x = gate.as<float>(), da.x_per_slot = true, da.y = eo.as<float>();
  cuda::moe_matmul(da);
  cuda::moe_combine({.expert_out = eo.as<float>(), .weights = wts.as<float>(), .out = comb.as<float>(),
                     .n_tok = n_tok, .n_embd = E, .n_used = K});
  auto dx = cuda::to_device(x);
  cuda::add({.x = dx.as<float>(), .y = comb.as<float>(), .n = n_tok * E});
  return {download<float>(gate, n_slots * F), download<float>(dx, n_tok * E), download<float>(comb, n_tok * E)};
}

class DecodeMoe : public ::testing::TestWithParam<GgmlType> {};

TEST_P(DecodeMoe, FusedExpertsEqualTheUnfusedSequence) {
  DF_REQUIRE_GPU();
  const GgmlType type = GetParam();
  const int32_t X = 16;
  const int64_t E = 512, F = 256;  // rows of 16-byte multiples for both types
  const int K = 4;
  // Q4_K and Q5_K experts with Q6_K down projections, as Q4_K_M and Q5_K_M files pair them.
  const GgmlType down_type = type == GgmlType::Q4_K || type == GgmlType::Q5_K ? GgmlType::Q6_K : type;
  const HostMat hg = random_mat(type, X * F, E, 231), hu = random_mat(type, X * F, E, 232);
  const HostMat hd = random_mat(down_type, X * E, F, 233);
  auto dg = upload(hg), du = upload(hu), dd = upload(hd);
  const model::Mat g{type, dg.as<uint8_t>(), E, F, hg.row_bytes}, u{type, du.as<uint8_t>(), E, F, hu.row_bytes};
  const model::Mat d{down_type, dd.as<uint8_t>(), F, E, hd.row_bytes};
  const uint64_t gs = F * hg.row_bytes, us = F * hu.row_bytes, ds = E * hd.row_bytes;
  for (int64_t n_tok : {1, 3}) {
    ASSERT_TRUE(cuda::moe_decode_supported(g, u, d, n_tok, K));
    std::vector<int32_t> ids = {9, 0, 15, 3, 3, 9, 1, 2, 15, 14, 13, 12};
    ids.resize(n_tok * K);
    const auto w = random_floats(n_tok * K, 234, 0.0f, 1.0f);
    const auto xn = random_floats(n_tok * E, 235, -2.0f, 2.0f);
    const auto x = random_floats(n_tok * E, 236, -4.0f, 4.0f);
    auto dids = cuda::to_device(ids), dw = cuda::to_device(w), dxn = cuda::to_device(xn);
    const MoeReference ref = unfused_moe(g, u, d, gs, us, ds, X, dids, dw, dxn, x, n_tok, K);

    cuda::DeviceBuffer xq(cuda::q8_scratch_bytes(type, E, n_tok));
    cuda::quantize_q8_0({.x = dxn.as<float>(), .y = xq.as<uint8_t>(), .n_rows = n_tok, .cols = E});
    cuda::DeviceBuffer act(n_tok * K * F * 4), act_q8(cuda::q8_scratch_bytes(type, F, n_tok * K));
    cuda::moe_decode_gate_up({.gate = g, .up = u, .gate_stride = gs, .up_stride = us, .n_expert = X,
                              .ids = dids.as<int32_t>(), .n_tok = n_tok, .n_used = K, .x_q8 = xq.as<uint8_t>(),
                              .act = act.as<float>(), .act_q8 = act_q8.as<uint8_t>()});
    EXPECT_EQ(count_differ(download<float>(act, ref.act.size()), ref.act), 0u) << "SwiGLU output, n_tok " << n_tok;
    auto ax = cuda::to_device(x);
    cuda::moe_decode_down({.down = d, .down_stride = ds, .n_expert = X, .ids = dids.as<int32_t>(),
                           .weights = dw.as<float>(), .n_tok = n_tok, .n_used = K, .act_q8 = act_q8.as<uint8_t>(),
                           .x = ax.as<float>(), .out = ax.as<float>()});
    EXPECT_EQ(count_differ(download<float>(ax, ref.out.size()), ref.out), 0u) << "x + combine, n_tok " << n_tok;
    cuda::DeviceBuffer sum(n_tok * E * 4);
    cuda::moe_decode_down({.down = d, .down_stride = ds, .n_expert = X, .ids = dids.as<int32_t>(),
                           .weights = dw.as<float>(), .n_tok = n_tok, .n_used = K, .act_q8 = act_q8.as<uint8_t>(),
                           .out = sum.as<float>()});
    EXPECT_EQ(count_differ(download<float>(sum, ref.sum.size()), ref.sum), 0u) << "combine alone, n_tok " << n_tok;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, DecodeMoe,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K,
                                           GgmlType::Q6_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_XS,
                                           GgmlType::IQ4_NL, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1),
                         [](const auto& i) { return std::string(gguf::type_name(i.param)); });

// ---- throughput at the Qwen3-30B-A3B decode shapes (one token)

TEST(DecodeThroughput, MatvecQ4_0) {
  DF_REQUIRE_GPU();
  struct Shape {
    int64_t rows, cols;
    const char* what;
  };
  for (const Shape& sh : {Shape{4096, 2048, "q projection"}, Shape{2048, 4096, "o projection"},
                          Shape{151936, 2048, "output head"}}) {
    const HostMat w = random_q4(sh.rows, sh.cols, 241);
    auto dw = upload(w);
    const model::Mat m = dmat(w, dw);
    const auto x = random_floats(sh.cols, 242);
    auto dx = cuda::to_device(x);
    cuda::DeviceBuffer xq(cuda::q8_scratch_bytes(GgmlType::Q4_0, sh.cols, 1)), dy(sh.rows * 4);
    cuda::quantize_q8_0({.x = dx.as<float>(), .y = xq.as<uint8_t>(), .n_rows = 1, .cols = sh.cols});
    cuda::DecodeMatvecArgs a{.n_parts = 1, .x = dx.as<float>(), .x_q8 = xq.as<uint8_t>(), .n_tok = 1};
    a.parts[0] = {.w = m, .y = dy.as<float>()};
    const double ms = time_ms(50, [&] { cuda::decode_matvec(a); });
    a.x_q8 = nullptr;
    const double ms_f32 = time_ms(50, [&] { cuda::decode_matvec(a); });
    // Sampled rows against the CPU.
    auto got = download<float>(dy, sh.rows);
    auto ctx = scalar_context();
    for (int64_t r : {int64_t(0), sh.rows / 3, sh.rows - 1}) {
      HostMat one{w.type, 1, w.cols, w.row_bytes,
                  std::vector<uint8_t>(w.bytes.begin() + r * w.row_bytes, w.bytes.begin() + (r + 1) * w.row_bytes)};
      float want = 0;
      cpu::matmul(ctx, one.mat(), x.data(), 1, &want);
      ASSERT_NEAR(got[r], want, 1.1 * sum_order_tolerance(sh.cols, abs_dot(one, 0, x.data()))) << "row " << r;
    }
    const double gb = double(w.bytes.size()) / 1e6;
    std::printf("[decode-throughput] decode_matvec Q4_0 %lldx%lld (%s): %.4f ms, %.0f GB/s of weights (Q8_0 input); "
                "%.4f ms, %.0f GB/s quantizing the f32 input per block\n",
                (long long)sh.rows, (long long)sh.cols, sh.what, ms, gb / ms, ms_f32, gb / ms_f32);
  }
  // q, k and v of one layer in one launch (4096 + 512 + 512 rows of 2048).
  const HostMat wq = random_q4(4096, 2048, 243), wk = random_q4(512, 2048, 244), wv = random_q4(512, 2048, 245);
  auto dq = upload(wq), dk = upload(wk), dv = upload(wv);
  const auto x = random_floats(2048, 246);
  auto dx = cuda::to_device(x);
  cuda::DeviceBuffer xq(cuda::q8_scratch_bytes(GgmlType::Q4_0, 2048, 1)), yq(4096 * 4), yk(512 * 4), yv(512 * 4);
  cuda::quantize_q8_0({.x = dx.as<float>(), .y = xq.as<uint8_t>(), .n_rows = 1, .cols = 2048});
  cuda::DecodeMatvecArgs a{.n_parts = 3, .x = dx.as<float>(), .x_q8 = xq.as<uint8_t>(), .n_tok = 1};
  a.parts[0] = {.w = dmat(wq, dq), .y = yq.as<float>()};
  a.parts[1] = {.w = dmat(wk, dk), .y = yk.as<float>()};
  a.parts[2] = {.w = dmat(wv, dv), .y = yv.as<float>()};
  const double ms = time_ms(50, [&] { cuda::decode_matvec(a); });
  const double gb = double(wq.bytes.size() + wk.bytes.size() + wv.bytes.size()) / 1e6;
  std::printf("[decode-throughput] decode_matvec q+k+v in one launch: %.4f ms, %.0f GB/s of weights\n", ms, gb / ms);
}

// One MoE layer's routed experts for one token: 128 experts of 768 x 2048, top-8. The fused pair of launches
// against the unfused sequence (moe_matmul gate and up, swiglu, moe_matmul down, moe_combine, add).
TEST(DecodeThroughput, RoutedExpertsQ4_0) {
  DF_REQUIRE_GPU();
  const int32_t X = 128;
  const int64_t F = 768, E = 2048;
  const int K = 8;
  const HostMat hg = random_q4(X * F, E, 251), hu = random_q4(X * F, E, 252), hd = random_q4(X * E, F, 253);
  auto dg = upload(hg), du = upload(hu), dd = upload(hd);
  const model::Mat g{GgmlType::Q4_0, dg.as<uint8_t>(), E, F, hg.row_bytes};
  const model::Mat u{GgmlType::Q4_0, du.as<uint8_t>(), E, F, hu.row_bytes};
  const model::Mat d{GgmlType::Q4_0, dd.as<uint8_t>(), F, E, hd.row_bytes};
  const uint64_t gs = F * hg.row_bytes, us = F * hu.row_bytes, ds = E * hd.row_bytes;
  ASSERT_TRUE(cuda::moe_decode_supported(g, u, d, 1, K));
  const std::vector<int32_t> ids = {17, 3, 126, 64, 90, 5, 41, 77};
  const auto w = random_floats(K, 254, 0.0f, 0.3f);
  const auto xn = random_floats(E, 255, -2.0f, 2.0f), x = random_floats(E, 256, -4.0f, 4.0f);
  auto dids = cuda::to_device(ids), dw = cuda::to_device(w), dxn = cuda::to_device(xn), dx = cuda::to_device(x);
  cuda::DeviceBuffer xq(cuda::q8_scratch_bytes(GgmlType::Q4_0, E, 1));
  cuda::DeviceBuffer act_q8(cuda::q8_scratch_bytes(GgmlType::Q4_0, F, K));
  cuda::quantize_q8_0({.x = dxn.as<float>(), .y = xq.as<uint8_t>(), .n_rows = 1, .cols = E});
  auto gate_up = [&] {
    cuda::moe_decode_gate_up({.gate = g, .up = u, .gate_stride = gs, .up_stride = us, .n_expert = X,
                              .ids = dids.as<int32_t>(), .n_tok = 1, .n_used = K, .x_q8 = xq.as<uint8_t>(),
                              .act_q8 = act_q8.as<uint8_t>()});
  };
  auto fused = [&](float* residual) {
    gate_up();
    cuda::moe_decode_down({.down = d, .down_stride = ds, .n_expert = X, .ids = dids.as<int32_t>(),
                           .weights = dw.as<float>(), .n_tok = 1, .n_used = K, .act_q8 = act_q8.as<uint8_t>(),
                           .x = residual, .out = residual});
  };
  const double ms_gu = time_ms(50, gate_up);
  const double ms = time_ms(50, [&] { fused(dx.as<float>()); });
  // The unfused sequence (its own quantizations included), for comparison.
  cuda::DeviceBuffer gate(K * F * 4), up(K * F * 4), eo(K * E * 4), comb(E * 4);
  cuda::DeviceBuffer scratch(cuda::q8_scratch_bytes(GgmlType::Q4_0, E, K));
  const cuda::MoeMatmulArgs base{.n_expert = X, .ids = dids.as<int32_t>(), .n_tok = 1, .n_used = K,
                                 .scratch = scratch.as<uint8_t>()};
  cuda::MoeMatmulArgs ga = base, ua = base, da = base;
  ga.w = g, ga.expert_stride = gs, ga.x = dxn.as<float>(), ga.y = gate.as<float>();
  ua.w = u, ua.expert_stride = us, ua.x = dxn.as<float>(), ua.y = up.as<float>();
  da.w = d, da.expert_stride = ds, da.x = gate.as<float>(), da.x_per_slot = true, da.y = eo.as<float>();
  auto unfused = [&](float* residual) {
    cuda::moe_matmul(ga);
    cuda::moe_matmul(ua);
    cuda::glu({.gate = gate.as<float>(), .up = up.as<float>(), .y = gate.as<float>(), .n = K * F});
    cuda::moe_matmul(da);
    cuda::moe_combine({.expert_out = eo.as<float>(), .weights = dw.as<float>(), .out = comb.as<float>(), .n_tok = 1,
                       .n_embd = E, .n_used = K});
    cuda::add({.x = residual, .y = comb.as<float>(), .n = E});
  };
  const double ms_old = time_ms(50, [&] { unfused(dx.as<float>()); });
  // The result of one fused pass from a fresh residual equals one unfused pass's.
  auto r1 = cuda::to_device(x), r2 = cuda::to_device(x);
  fused(r1.as<float>());
  unfused(r2.as<float>());
  EXPECT_EQ(count_differ(download<float>(r1, E), download<float>(r2, E)), 0u);
  const double gb = double(K) * double(gs + us + ds) / 1e6, gb_gu = double(K) * double(gs + us) / 1e6;
  std::printf("[decode-throughput] routed experts Q4_0 top-%d of %d (%lldx%lld): fused %.4f ms, %.0f GB/s "
              "(gate+up %.4f ms, %.0f GB/s); unfused 6 launches %.4f ms, %.0f GB/s\n",
              K, X, (long long)F, (long long)E, ms, gb / ms, ms_gu, gb_gu / ms_gu, ms_old, gb / ms_old);
}

// The MoE router of one layer: the F32 128 x 2048 product for one token (a block per row) and for a 512-token
// prefill batch (cuBLAS), then the routing kernel; sampled rows against the CPU within the summation-order bound.
TEST(DecodeThroughput, RouterF32AndRoute) {
  DF_REQUIRE_GPU();
  const int64_t X = 128, E = 2048, n_batch = 512;
  const HostMat w = random_mat(GgmlType::F32, X, E, 261);
  auto dw = upload(w);
  const model::Mat m = dmat(w, dw);
  const auto x = random_floats(n_batch * E, 262, -2.0f, 2.0f);
  auto dx = cuda::to_device(x);
  cuda::DeviceBuffer dy(n_batch * X * 4), ids(8 * 4), wts(8 * 4);
  auto ctx = scalar_context();
  std::vector<float> want(X);
  for (int64_t n_tok : {int64_t(1), n_batch}) {
    const double ms = time_ms(20, [&] {
      cuda::matmul({.w = m, .x = dx.as<float>(), .n_tok = n_tok, .y = dy.as<float>()});
    });
    const auto got = download<float>(dy, n_tok * X);
    const int64_t t = n_tok - 1;  // the last token's rows
    cpu::matmul(ctx, w.mat(), x.data() + t * E, 1, want.data());
    double worst = 0;
    for (int64_t r = 0; r < X; ++r) {
      const double tol = 1.1 * sum_order_tolerance(E, abs_dot(w, r, x.data() + t * E));
      const double diff = std::fabs(double(got[t * X + r]) - double(want[r]));
      worst = std::max(worst, diff / tol);
      ASSERT_LE(diff, tol) << "n_tok " << n_tok << " row " << r;
    }
    std::printf("[decode-throughput] router F32 %lldx%lld n_tok %lld: %.4f ms, %.0f GB/s of weights, %.2f TFLOP/s; "
                "worst diff %.3f of tolerance\n",
                (long long)X, (long long)E, (long long)n_tok, ms, double(w.bytes.size()) / 1e6 / ms,
                2.0 * double(X * E * n_tok) / 1e9 / ms, worst);
  }
  const double ms = time_ms(50, [&] {
    cuda::route({.logits = dy.as<float>(), .n_tok = 1, .n_expert = int(X), .n_used = 8, .norm_topk = true,
                 .ids = ids.as<int32_t>(), .weights = wts.as<float>()});
  });
  const auto gid = download<int32_t>(ids, 8);
  for (int32_t id : gid) ASSERT_TRUE(id >= 0 && id < X) << id;
  std::printf("[decode-throughput] route %lld experts top-8, one token: %.4f ms\n", (long long)X, ms);
}

}  // namespace
}  // namespace df::test
