// The 256-element types' products in the CUDA decode order (Kernels::dot_q4_k_q8_0 and its kin), which a GPU
// run's CPU share of its experts computes: against plain double-precision math, every table against the scalar one,
// and through matmul_many with MatmulJob::cuda_order. (The GPU side, bit for bit: tests/gpu/kquant_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu/kernel_support.h"
#include "diskformer/backend/cpu/dequant.h"
#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cpu/thread_pool.h"
#include "support/random.h"

namespace df::cpu {
namespace {

using test::randn;

// The 256-element types' products in the CUDA decode order (Kernels::dot_q4_k_q8_0 and its kin), by type.
const gguf::GgmlType kCudaOrderTypes[] = {gguf::GgmlType::Q2_K, gguf::GgmlType::Q3_K, gguf::GgmlType::Q4_K,
                                          gguf::GgmlType::Q5_K, gguf::GgmlType::Q6_K, gguf::GgmlType::IQ4_XS};
float cuda_order_dot(const Kernels& k, gguf::GgmlType t, int64_t n, const uint8_t* w, const BlockQ8_0* a) {
  using gguf::GgmlType;
  switch (t) {
    case GgmlType::Q2_K: return k.dot_q2_k_q8_0(n, reinterpret_cast<const BlockQ2_K*>(w), a);
    case GgmlType::Q3_K: return k.dot_q3_k_q8_0(n, reinterpret_cast<const BlockQ3_K*>(w), a);
    case GgmlType::Q4_K: return k.dot_q4_k_q8_0(n, reinterpret_cast<const BlockQ4_K*>(w), a);
    case GgmlType::Q5_K: return k.dot_q5_k_q8_0(n, reinterpret_cast<const BlockQ5_K*>(w), a);
    case GgmlType::Q6_K: return k.dot_q6_k_q8_0(n, reinterpret_cast<const BlockQ6_K*>(w), a);
    default: return k.dot_iq4_xs_q8_0(n, reinterpret_cast<const BlockIQ4_XS*>(w), a);
  }
}

TEST(Kernels, KQuantRowsAgainstQ8_0BlocksInTheGpuDecodeOrder) {
  // The 256-element types against Q8_0 activations as the CUDA decode products compute them (a GPU run's CPU share
  // of its experts): the scalar table against the dequantized weights and activations in double (a wrong code,
  // scale or offset moves a term by far more than the f32 roundings do), and every table bit for bit the scalar
  // one. 3 super-blocks leave most of the 32 lanes empty, 9 wrap around them.
  using gguf::GgmlType;
  for (GgmlType type : kCudaOrderTypes)
    for (int64_t n : {int64_t(256), int64_t(256 * 3), int64_t(256 * 9)})
      for (uint64_t seed : {uint64_t(1), uint64_t(2)}) {
        const auto w = random_weights(type, n, 70 + seed);
        const Act a = quantize_for(GgmlType::Q8_0, randn(size_t(n), 80 + seed));
        const auto* ab = reinterpret_cast<const BlockQ8_0*>(a.bytes.data());
        std::vector<float> wf(static_cast<size_t>(n));
        dequantize_row(type, w.data(), n, wf.data());
        double want = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
          want += double(wf[size_t(i)]) * a.values[size_t(i)];
          mag += std::fabs(double(wf[size_t(i)]) * a.values[size_t(i)]);
        }
        const float got = cuda_order_dot(scalar_kernels(), type, n, w.data(), ab);
        EXPECT_NEAR(got, want, 1e-5 * mag + 1e-6) << gguf::type_name(type) << " n=" << n;
        for (const Kernels* k : all_tables())
          EXPECT_EQ(bits(cuda_order_dot(*k, type, n, w.data(), ab)), bits(got))
              << k->name << " " << gguf::type_name(type) << " n=" << n;
      }
}

TEST(Ops, MatmulInTheCudaOrderTakesQ8_0ActivationsForTheSuperBlockTypes) {
  // MatmulJob::cuda_order (a GPU run's CPU share): each 256-element type's rows against Q8_0 activations in the CUDA
  // decode order, 16 rows (Q4_K's interleaved order is not taken) over three threads, for one and two tokens.
  ThreadPool pool(3);
  Context ctx;
  ctx.pool = &pool;
  for (const gguf::GgmlType t : kCudaOrderTypes) {
    const int64_t cols = 512, rows = 16, n_tok = 2;
    const auto data = random_weights(t, cols * rows, 90 + uint64_t(t));
    const model::Mat w{t, data.data(), cols, rows, gguf::row_bytes(t, uint64_t(cols))};
    const auto x = randn(size_t(n_tok * cols), 91);
    std::vector<float> y(size_t(n_tok * rows));
    const MatmulJob job{&w, x.data(), n_tok, y.data(), /*per_row=*/true, /*cuda_order=*/true};
    matmul_many(ctx, std::span<const MatmulJob>(&job, 1));
    for (int64_t tok = 0; tok < n_tok; ++tok) {
      const Act a =
          quantize_for(gguf::GgmlType::Q8_0, std::vector<float>(x.begin() + tok * cols, x.begin() + (tok + 1) * cols));
      const auto* ab = reinterpret_cast<const BlockQ8_0*>(a.bytes.data());
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(bits(y[size_t(tok * rows + r)]), bits(cuda_order_dot(scalar_kernels(), t, cols, w.row(r), ab)))
            << gguf::type_name(t) << " token " << tok << " row " << r;
    }
    EXPECT_TRUE(rounds_as_cuda_decode(t)) << gguf::type_name(t);
  }
}

}  // namespace
}  // namespace df::cpu
