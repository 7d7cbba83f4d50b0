// The K-quant, IQ4 and offset weight types (Q2_K .. Q6_K, IQ4_NL, IQ4_XS, Q4_1, Q5_0, Q5_1) on CUDA, each against
// the CPU's dequantized weights (cpu::dequantize_row). The GPU quantizes the activations to Q8_0 blocks of 32 and
// decodes each 32-element piece of a weight row to integer codes with per-half scales and offsets, so its products
// equal the dot product of the dequantized weights with the Q8_0-rounded activations up to the f32 rounding of the
// per-piece scaling and the summation order. The reference here is that dot product in double, and the tolerance
// 2^-14 of the sum of the terms' magnitudes (codes times scales and offsets, each taken as the larger of the two
// halves' scale or offset), which is far above f32 summation errors and far below a wrongly decoded code or scale.
// Every case prints its worst difference against that tolerance and the number of rows outside it, and against the
// CPU engine's own product (llama.cpp's, with Q8_K activations) for information. Prefill batches given a
// dequantization workspace take f16 tiles and cuBLAS instead, against the f16-rounded weights and activations.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cuda/mmq.cuh"
#include "diskformer/backend/cpu/dequant.h"
#include "diskformer/backend/cpu/ops.h"
#include "gpu/gpu_support.h"
#include "gpu/kernel_support.h"
#include "support/test_paths.h"
#include "support/tiny_model.h"

namespace df::test {
namespace {

using gguf::GgmlType;

const GgmlType kTypes[] = {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,   GgmlType::Q3_K,
                           GgmlType::Q2_K, GgmlType::IQ4_XS, GgmlType::IQ4_NL, GgmlType::Q4_1,
                           GgmlType::Q5_0, GgmlType::Q5_1};

std::string type_param_name(const ::testing::TestParamInfo<GgmlType>& i) { return std::string(gguf::type_name(i.param)); }

// x rounded as the GPU's Q8_0 activations hold it (cpu::quantize_q8_0 is bit for bit the GPU's quantizer).
std::vector<float> q8_round(const std::vector<float>& x) {
  std::vector<cpu::BlockQ8_0> q(x.size() / 32);
  cpu::scalar_kernels().quantize_q8_0(x.data(), q.data(), int64_t(x.size()));
  std::vector<float> out(x.size());
  cpu::dequantize_row(GgmlType::Q8_0, reinterpret_cast<const uint8_t*>(q.data()), int64_t(x.size()), out.data());
  return out;
}

// Row r of w dequantized by the CPU.
std::vector<float> cpu_row(const HostMat& w, int64_t r) {
  std::vector<float> out(w.cols);
  cpu::dequantize_row(w.type, w.bytes.data() + r * w.row_bytes, w.cols, out.data());
  return out;
}

// The reference dot and its tolerance: the dequantized row with the Q8_0-rounded activations, in double. The scale
// of the terms: each 16-element half's weights spread around its offset, so a term's magnitude is bounded by
// (|w_i| + max |w| of its half) * |x_i|.
struct Ref {
  double dot = 0, tol = 0;
};
Ref reference(const std::vector<float>& w, const float* xq) {
  Ref r;
  double mag = 0;
  for (size_t h = 0; h < w.size(); h += 16) {
    float wmax = 0;
    for (size_t i = h; i < h + 16; ++i) wmax = std::max(wmax, std::fabs(w[i]));
    for (size_t i = h; i < h + 16; ++i) {
      r.dot += double(w[i]) * double(xq[i]);
      mag += (double(std::fabs(w[i])) + wmax) * std::fabs(double(xq[i]));
    }
  }
  r.tol = std::ldexp(mag, -14) + 1e-6;
  return r;
}

// One case's summary line and failure count.
struct Tally {
  const char* what;
  GgmlType type;
  double worst = 0, max_abs = 0, max_abs_cpu = 0;
  int64_t bad = 0, n = 0;
  void add(double got, const Ref& ref, double cpu_engine = NAN) {
    const double d = std::fabs(got - ref.dot);
    worst = std::max(worst, d / ref.tol);
    max_abs = std::max(max_abs, d);
    if (!std::isnan(cpu_engine)) max_abs_cpu = std::max(max_abs_cpu, std::fabs(got - cpu_engine));
    bad += !(d <= ref.tol);  // NaN counts as bad
    ++n;
  }
  void report(const std::string& shape) const {
    std::printf("[kquant] %-14s %-6s %s: max abs err %.3g (worst %.3f of tolerance), %lld of %lld outside; "
                "max abs diff to the CPU engine %.3g\n",
                what, std::string(gguf::type_name(type)).c_str(), shape.c_str(), max_abs, worst, (long long)bad,
                (long long)n, max_abs_cpu);
    EXPECT_EQ(bad, 0) << what << " " << gguf::type_name(type) << " " << shape;
  }
};

class CudaKQuant : public ::testing::TestWithParam<GgmlType> {};

// Dequantized rows (the embedding lookup) equal the CPU's bit for bit.
TEST_P(CudaKQuant, GetRowsEqualCpuDequantize) {
  DF_REQUIRE_GPU();
  const GgmlType t = GetParam();
  const int64_t rows = 9, cols = 512;
  const HostMat w = random_mat(t, rows, cols, 21);
  cuda::DeviceBuffer dw(w.bytes.size());
  dw.upload(w.bytes.data(), w.bytes.size());
  const std::vector<int32_t> ids = {3, 0, 8, 3, 5};
  auto dids = cuda::to_device(ids);
  cuda::DeviceBuffer out(ids.size() * cols * 4);
  cuda::get_rows({.table = dmat(w, dw), .ids = dids.as<int32_t>(), .n = int64_t(ids.size()), .out = out.as<float>()});
  auto got = download<float>(out, ids.size() * cols);
  int64_t bad = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto want = cpu_row(w, ids[i]);
    for (int64_t c = 0; c < cols; ++c) bad += !(got[i * cols + c] == want[c]);
  }
  std::printf("[kquant] get_rows       %-6s: %lld of %lld elements differ\n", std::string(gguf::type_name(t)).c_str(),
              (long long)bad, (long long)(ids.size() * cols));
  EXPECT_EQ(bad, 0);
}

// matmul for a decode vector, a few decode vectors, a small batch and a prefill batch (n_tok >= kMmaMinTokens).
TEST_P(CudaKQuant, MatmulMatchesTheDequantizedReference) {
  DF_REQUIRE_GPU();
  const GgmlType t = GetParam();
  const int64_t rows = 75, cols = 1024;
  const HostMat w = random_mat(t, rows, cols, 22);
  std::vector<std::vector<float>> wr(rows);
  for (int64_t r = 0; r < rows; ++r) wr[r] = cpu_row(w, r);
  cuda::DeviceBuffer dw(w.bytes.size());
  dw.upload(w.bytes.data(), w.bytes.size());
  auto ctx = scalar_context();
  for (int64_t n_tok : {int64_t(1), int64_t(3), int64_t(7), int64_t(40)}) {
    const auto x = random_floats(n_tok * cols, 23 + uint32_t(n_tok), -2.0f, 2.0f);
    const auto xq = q8_round(x);
    std::vector<float> cpu_engine(n_tok * rows);
    cpu::matmul(ctx, w.mat(), x.data(), n_tok, cpu_engine.data());
    auto dx = cuda::to_device(x);
    cuda::DeviceBuffer dy(n_tok * rows * 4);
    cuda::DeviceBuffer scratch(std::max<uint64_t>(1, cuda::q8_scratch_bytes(t, cols, n_tok)));
    cuda::matmul({.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = n_tok, .y = dy.as<float>(),
                  .scratch = scratch.as<uint8_t>()});
    auto got = download<float>(dy, n_tok * rows);
    Tally tally{"matmul", t};
    for (int64_t j = 0; j < n_tok; ++j)
      for (int64_t r = 0; r < rows; ++r)
        tally.add(got[j * rows + r], reference(wr[r], xq.data() + j * cols), cpu_engine[j * rows + r]);
    tally.report(std::to_string(rows) + "x" + std::to_string(cols) + " n_tok " + std::to_string(n_tok));
    // Activations quantized once and shared (the forward's q/k/v and gate/up): the same results bit for bit.
    cuda::DeviceBuffer xq8(cuda::q8_scratch_bytes(t, cols, n_tok)), dy2(n_tok * rows * 4);
    cuda::quantize_q8_0({.x = dx.as<float>(), .y = xq8.as<uint8_t>(), .n_rows = n_tok, .cols = cols});
    cuda::matmul({.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = n_tok, .y = dy2.as<float>(),
                  .x_q8 = xq8.as<uint8_t>()});
    EXPECT_EQ(download<float>(dy2, n_tok * rows), got) << "n_tok " << n_tok;
  }
  // Prefill batches with a dequantization workspace: f16 tiles and cuBLAS. The reference then takes the weights and
  // the activations rounded to f16 (their products are exact in f32, so only the summation order differs).
  // 1100 rows: two tiles of kDequantTileRows, the second partial.
  const HostMat big = random_mat(t, 1100, 512, 24);
  cuda::DeviceBuffer dbig(big.bytes.size());
  dbig.upload(big.bytes.data(), big.bytes.size());
  struct Shape {
    const HostMat* w;
    const cuda::DeviceBuffer* dev;
    int64_t n_tok;
  };
  for (const Shape& sh : {Shape{&w, &dw, 16}, Shape{&w, &dw, 300}, Shape{&big, &dbig, 40}}) {
    const HostMat& hw = *sh.w;
    const int64_t n_tok = sh.n_tok, rows = hw.rows, cols = hw.cols;
    const auto x = random_floats(n_tok * cols, 41 + uint32_t(n_tok), -2.0f, 2.0f);
    std::vector<float> xh(x.size());
    for (size_t i = 0; i < x.size(); ++i) xh[i] = cpu::f16_to_f32(cpu::f32_to_f16(x[i]));
    auto dx = cuda::to_device(x);
    cuda::DeviceBuffer dy(n_tok * rows * 4), work(cuda::dequant_work_bytes(cols, n_tok));
    cuda::matmul({.w = dmat(hw, *sh.dev), .x = dx.as<float>(), .n_tok = n_tok, .y = dy.as<float>(),
                  .dequant = work.as<uint8_t>()});
    auto got = download<float>(dy, n_tok * rows);
    Tally tally{"matmul_f16", t};
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> wh = cpu_row(hw, r);
      for (float& v : wh) v = cpu::f16_to_f32(cpu::f32_to_f16(v));
      for (int64_t j = 0; j < n_tok; ++j) tally.add(got[j * rows + r], reference(wh, xh.data() + j * cols));
    }
    tally.report(std::to_string(rows) + "x" + std::to_string(cols) + " n_tok " + std::to_string(n_tok) +
                 " (f16 tiles)");
  }
}

// A decode product of the 256-element types equals, bit for bit, the CPU's product of the same row in the CUDA
// decode order (Kernels::dot_q4_k_q8_0 and its kin, what a GPU run's CPU share of its experts computes), with the
// activations quantized by the CPU: 3 super-blocks a row leave lanes of the warp empty, 9 wrap around them.
TEST_P(CudaKQuant, DecodeProductsEqualTheCpuInTheirOrder) {
  DF_REQUIRE_GPU();
  const GgmlType t = GetParam();
  if (gguf::type_info(t)->block_elems != 256) GTEST_SKIP() << "a 32-element type: the CPU keeps its own order";
  for (int64_t cols : {int64_t(768), int64_t(2304)}) {
    const int64_t rows = 40;
    const HostMat w = random_mat(t, rows, cols, 25 + uint32_t(cols));
    cuda::DeviceBuffer dw(w.bytes.size());
    dw.upload(w.bytes.data(), w.bytes.size());
    const auto x = random_floats(cols, 26, -2.0f, 2.0f);
    auto dx = cuda::to_device(x);
    cuda::DeviceBuffer dy(rows * 4), scratch(cuda::q8_scratch_bytes(t, cols, 1));
    cuda::matmul({.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = 1, .y = dy.as<float>(),
                  .scratch = scratch.as<uint8_t>()});
    const auto got = download<float>(dy, rows);
    auto ctx = scalar_context();
    const model::Mat wm = w.mat();
    for (const cpu::Kernels* k : {&cpu::scalar_kernels(), &cpu::best_kernels()}) {
      ctx.kernels = k;
      std::vector<float> want(rows);
      const cpu::MatmulJob job{.w = &wm, .x = x.data(), .n_tok = 1, .y = want.data(), .per_row = true,
                               .cuda_order = true};
      cpu::matmul_many(ctx, std::span<const cpu::MatmulJob>(&job, 1));
      int64_t differ = 0;
      for (int64_t r = 0; r < rows; ++r) differ += std::memcmp(&got[r], &want[r], 4) != 0;
      std::printf("[kquant] cuda order     %-6s %lldx%lld (%s): %lld of %lld rows differ\n",
                  std::string(gguf::type_name(t)).c_str(), (long long)rows, (long long)cols, k->name,
                  (long long)differ, (long long)rows);
      EXPECT_EQ(differ, 0) << gguf::type_name(t) << " cols " << cols << " " << k->name;
    }
  }
}

// The int8 tensor-core products (mmq.cu's piece kernels), dense and grouped by expert, on ragged shapes: rows past a
// 64-row tile, token counts past 32 and 64, an expert with several items of slots and one with a single slot, and
// for the 32-element types 9 blocks a row (a last stage of one piece). Rows of 630 (Q6_K) or 198 (Q5_0) bytes start
// 2 bytes past a word, so half of them are copied through shifted windows. Each against the dequantized reference,
// against the dp4a kernels within the summation order's tolerance (the same Q8_0 activations; the block terms are
// the same operations but for the per-16 scaled types, whose halves are rounded apart), and every 64-row tile shape
// bit for bit alike.
TEST_P(CudaKQuant, TensorCoreProductsMatchTheReferenceAndTheDp4aKernels) {
  DF_REQUIRE_GPU();
  const GgmlType t = GetParam();
  const int64_t cols = gguf::type_info(t)->block_elems == 256 ? 768 : 288, rows = 100;
  const uint64_t q8_stride = uint64_t(cols / 32) * 34;
  auto dp4a_tol = [&](const std::vector<float>& w, const float* xq) {
    return 1.1 * sum_order_tolerance(cols, reference(w, xq).tol * std::ldexp(1.0, 14));
  };
  // Dense.
  {
    const HostMat w = random_mat(t, rows, cols, 61);
    std::vector<std::vector<float>> wr(rows);
    for (int64_t r = 0; r < rows; ++r) wr[r] = cpu_row(w, r);
    cuda::DeviceBuffer dw(w.bytes.size());
    dw.upload(w.bytes.data(), w.bytes.size());
    for (int64_t n_tok : {int64_t(17), int64_t(100)}) {
      const auto x = random_floats(n_tok * cols, 62 + uint32_t(n_tok), -2.0f, 2.0f);
      const auto xq = q8_round(x);
      auto dx = cuda::to_device(x);
      cuda::DeviceBuffer q8(cuda::q8_scratch_bytes(t, cols, n_tok)), dy(n_tok * rows * 4), dref(n_tok * rows * 4);
      cuda::quantize_q8_0({.x = dx.as<float>(), .y = q8.as<uint8_t>(), .n_rows = n_tok, .cols = cols});
      cuda::matmul({.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = n_tok, .y = dref.as<float>(),
                    .x_q8 = q8.as<uint8_t>(), .use_mma = false});
      const auto ref = download<float>(dref, n_tok * rows);
      std::vector<float> first;
      for (const cuda::mmq::Tile tile : {cuda::mmq::Tile{64, 32}, cuda::mmq::Tile{64, 64}}) {
        DF_CUDA_CHECK(cudaMemset(dy.data(), 0xff, dy.size()));  // NaN: an output never written fails
        cuda::mmq::dense(dmat(w, dw), q8.as<uint8_t>(), q8_stride, n_tok, dy.as<float>(), nullptr, tile);
        const auto got = download<float>(dy, n_tok * rows);
        if (first.empty()) {
          first = got;
          Tally tally{"mmq_dense", t};
          double worst = 0;
          for (int64_t j = 0; j < n_tok; ++j)
            for (int64_t r = 0; r < rows; ++r) {
              const size_t i = j * rows + r;
              tally.add(got[i], reference(wr[r], xq.data() + j * cols));
              const double tol = dp4a_tol(wr[r], xq.data() + j * cols);
              ASSERT_LE(std::fabs(double(got[i]) - double(ref[i])), tol)
                  << "token " << j << " row " << r << " got " << got[i] << " dp4a " << ref[i];
              worst = std::max(worst, std::fabs(double(got[i]) - double(ref[i])) / tol);
            }
          tally.report(std::to_string(rows) + "x" + std::to_string(cols) + " n_tok " + std::to_string(n_tok));
          std::printf("[kquant] mmq_dense      %-6s: worst diff to the dp4a kernel %.3f of its tolerance\n",
                      std::string(gguf::type_name(t)).c_str(), worst);
        } else {
          EXPECT_EQ(got, first) << "tile 64x" << tile.tokens << " n_tok " << n_tok;
        }
      }
    }
  }
  // Grouped: 9 experts, 100 tokens, top-2; expert 0 takes 75 slots (items of 64 and 11), expert 3 one, expert 8 none.
  const int64_t n_expert = 9, n_tok = 100;
  const int n_used = 2;
  const int64_t n_slots = n_tok * n_used;
  std::vector<int32_t> ids(n_slots);
  for (int64_t j = 0; j < n_tok; ++j) {
    ids[j * 2] = j < 75 ? 0 : int32_t(1 + j % 2);
    ids[j * 2 + 1] = j == 50 ? 3 : int32_t(4 + j % 4);
  }
  const HostMat w = random_mat(t, n_expert * rows, cols, 63);
  cuda::DeviceBuffer dw(w.bytes.size());
  dw.upload(w.bytes.data(), w.bytes.size());
  const model::Mat one{t, dw.as<uint8_t>(), cols, rows, w.row_bytes};
  const uint64_t stride = rows * w.row_bytes;
  auto dids = cuda::to_device(ids);
  const int32_t ts = cuda::moe_tile_slots(t);
  ASSERT_EQ(ts, 32);
  ASSERT_TRUE(cuda::int8_mma_type(t));
  const int64_t max_tiles = cuda::moe_max_tiles(n_slots, n_expert, ts);
  cuda::DeviceBuffer order(n_slots * 4), tiles((1 + 3 * max_tiles) * 4);
  cuda::moe_plan({.ids = dids.as<int32_t>(), .n_slots = n_slots, .n_expert = int32_t(n_expert),
                  .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>(), .tile_slots = ts});
  for (bool per_slot : {false, true}) {
    const int64_t n_in = per_slot ? n_slots : n_tok;
    const auto x = random_floats(n_in * cols, per_slot ? 64 : 65, -2.0f, 2.0f);
    const auto xq = q8_round(x);
    auto dx = cuda::to_device(x);
    const uint64_t out_bytes = n_slots * rows * 4;
    cuda::DeviceBuffer y(out_bytes), y_slot(out_bytes), scratch(cuda::q8_scratch_bytes(t, cols, n_slots));
    cuda::DeviceBuffer gathered(n_slots * cols * 4);
    DF_CUDA_CHECK(cudaMemset(y.data(), 0xff, out_bytes));
    cuda::moe_matmul_grouped({.w = one, .expert_stride = stride, .n_expert = int32_t(n_expert),
                              .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>(), .n_slots = n_slots,
                              .n_used = n_used, .x = dx.as<float>(), .x_per_slot = per_slot,
                              .gathered = gathered.as<float>(), .y = y.as<float>(),
                              .scratch = scratch.as<uint8_t>(), .tile_slots = ts});
    const auto got = download<float>(y, n_slots * rows);
    cuda::moe_matmul({.w = one, .expert_stride = stride, .n_expert = int32_t(n_expert), .ids = dids.as<int32_t>(),
                      .n_tok = n_tok, .n_used = n_used, .x = dx.as<float>(), .x_per_slot = per_slot,
                      .y = y_slot.as<float>(), .scratch = scratch.as<uint8_t>()});
    const auto ref = download<float>(y_slot, n_slots * rows);
    Tally tally{"mmq_grouped", t};
    double worst = 0;
    for (int64_t v = 0; v < n_slots; ++v) {
      const float* xin = xq.data() + (per_slot ? v : v / n_used) * cols;
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<float> wv = cpu_row(w, ids[v] * rows + r);
        const size_t i = v * rows + r;
        tally.add(got[i], reference(wv, xin));
        const double tol = dp4a_tol(wv, xin);
        ASSERT_LE(std::fabs(double(got[i]) - double(ref[i])), tol)
            << "slot " << v << " row " << r << " per_slot " << per_slot << " got " << got[i] << " dp4a " << ref[i];
        worst = std::max(worst, std::fabs(double(got[i]) - double(ref[i])) / tol);
      }
    }
    tally.report(std::to_string(rows) + "x" + std::to_string(cols) + (per_slot ? " input per slot" : " input per token"));
    std::printf("[kquant] mmq_grouped    %-6s: worst diff to the per-slot dp4a kernel %.3f of its tolerance\n",
                std::string(gguf::type_name(t)).c_str(), worst);
    // The 32-slot tile shape: the same results bit for bit.
    cuda::DeviceBuffer xq8(cuda::q8_scratch_bytes(t, cols, n_in));
    cuda::quantize_q8_0({.x = dx.as<float>(), .y = xq8.as<uint8_t>(), .n_rows = n_in, .cols = cols});
    DF_CUDA_CHECK(cudaMemset(y.data(), 0xff, out_bytes));
    cuda::mmq::grouped({.w = one, .expert_stride = stride, .n_expert = int32_t(n_expert), .order = order.as<int32_t>(),
                        .tiles = tiles.as<int32_t>(), .max_tiles = max_tiles, .tile_slots = ts,
                        .act = xq8.as<uint8_t>(), .act_stride = q8_stride, .act_div = per_slot ? 1 : n_used,
                        .y = y.as<float>(), .tile = {64, 32}});
    EXPECT_EQ(download<float>(y, n_slots * rows), got) << "per_slot " << per_slot;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaKQuant, ::testing::ValuesIn(kTypes), type_param_name);

// One expert's three matrices of different types, stacked as a file stores them: [n_expert][rows][cols] each.
struct Experts {
  HostMat gate, up, down;
};

// The routed-expert products on records of mixed types (gate and up of one type, down of another, as Q4_K_M files
// have them): per (token, slot), and grouped by expert in the plan's tiles (moe_tile_slots), each slot against its
// expert's dequantized rows (the grouped tiles of more than 8 slots run on the tensor cores, which sum in another
// order than the per-slot kernel).
struct MixCase {
  GgmlType gate_up, down;
};
class CudaKQuantExperts : public ::testing::TestWithParam<MixCase> {};

TEST_P(CudaKQuantExperts, RoutedProductsOfMixedRecordsMatchTheReference) {
  DF_REQUIRE_GPU();
  const MixCase mc = GetParam();
  const int64_t n_expert = 6, E = 256, F = 512, n_tok = 21;
  const int n_used = 3;
  const HostMat gate = random_mat(mc.gate_up, n_expert * F, E, 31);
  const HostMat up = random_mat(mc.gate_up, n_expert * F, E, 32);
  const HostMat down = random_mat(mc.down, n_expert * E, F, 33);
  // Distinct experts per token (offsets 0, 2, 4 of a rotating start), every expert busy, some with several tiles.
  std::vector<int32_t> ids(n_tok * n_used);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int k = 0; k < n_used; ++k) ids[t * n_used + k] = int32_t((t % 4 + 2 * k) % n_expert);
  const int64_t n_slots = n_tok * n_used;
  auto up_dev = [](const HostMat& m) {
    cuda::DeviceBuffer b(m.bytes.size());
    b.upload(m.bytes.data(), m.bytes.size());
    return b;
  };
  cuda::DeviceBuffer dg = up_dev(gate), du = up_dev(up), dd = up_dev(down);
  auto dids = cuda::to_device(ids);
  const model::Mat g1{mc.gate_up, dg.as<uint8_t>(), E, F, gate.row_bytes};
  const model::Mat u1{mc.gate_up, du.as<uint8_t>(), E, F, up.row_bytes};
  const model::Mat d1{mc.down, dd.as<uint8_t>(), F, E, down.row_bytes};
  const auto x = random_floats(n_tok * E, 34, -2.0f, 2.0f);
  const auto act = random_floats(n_slots * F, 35, -1.0f, 1.0f);
  auto dx = cuda::to_device(x);
  auto dact = cuda::to_device(act);
  const auto xq = q8_round(x), aq = q8_round(act);
  cuda::DeviceBuffer scratch(cuda::q8_scratch_bytes(mc.down, F, n_slots) + cuda::q8_scratch_bytes(mc.gate_up, E, n_slots));
  cuda::DeviceBuffer order(n_slots * 4), tiles((1 + 3 * cuda::moe_max_tiles(n_slots, n_expert)) * 4);
  cuda::DeviceBuffer gathered(n_slots * std::max(E, F) * 4);
  const int32_t ts = std::min({cuda::moe_tile_slots(mc.gate_up), cuda::moe_tile_slots(mc.down)});
  cuda::moe_plan({.ids = dids.as<int32_t>(), .n_slots = n_slots, .n_expert = int32_t(n_expert),
                  .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>(), .tile_slots = ts});
  struct Part {
    const char* name;
    model::Mat w;
    const HostMat* host;
    int64_t rows;
    bool per_slot;
  };
  for (const Part& p : {Part{"gate", g1, &gate, F, false}, Part{"up", u1, &up, F, false},
                        Part{"down", d1, &down, E, true}}) {
    const uint64_t stride = uint64_t(p.rows) * p.host->row_bytes;
    const float* in_dev = p.per_slot ? dact.as<float>() : dx.as<float>();
    const std::vector<float>& in_q = p.per_slot ? aq : xq;
    const int64_t cols = p.w.cols;
    cuda::DeviceBuffer y1(n_slots * p.rows * 4), y2(n_slots * p.rows * 4);
    cuda::moe_matmul({.w = p.w, .expert_stride = stride, .n_expert = int32_t(n_expert), .ids = dids.as<int32_t>(),
                      .n_tok = n_tok, .n_used = n_used, .x = in_dev, .x_per_slot = p.per_slot, .y = y1.as<float>(),
                      .scratch = scratch.as<uint8_t>()});
    auto got = download<float>(y1, n_slots * p.rows);
    cuda::moe_matmul_grouped({.w = p.w, .expert_stride = stride, .n_expert = int32_t(n_expert),
                              .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>(), .n_slots = n_slots,
                              .n_used = n_used, .x = in_dev, .x_per_slot = p.per_slot,
                              .gathered = gathered.as<float>(), .y = y2.as<float>(),
                              .scratch = scratch.as<uint8_t>(), .tile_slots = ts});
    auto grouped = download<float>(y2, n_slots * p.rows);
    // Tiles of more than 8 slots run on the tensor cores, which sum in another order: those are held to the
    // reference instead of the per-slot kernel.
    const bool exact = !(ts > 8 && cuda::int8_mma_type(p.w.type));
    Tally tally{"moe_matmul", p.w.type}, tally_grouped{"moe_grouped", p.w.type};
    int64_t grouped_diff = 0;
    for (int64_t v = 0; v < n_slots; ++v) {
      const float* xin = in_q.data() + (p.per_slot ? v : v / n_used) * cols;
      for (int64_t r = 0; r < p.rows; ++r) {
        const Ref ref = reference(cpu_row(*p.host, ids[v] * p.rows + r), xin);
        tally.add(got[v * p.rows + r], ref);
        tally_grouped.add(grouped[v * p.rows + r], ref);
        grouped_diff += !(grouped[v * p.rows + r] == got[v * p.rows + r]);
      }
    }
    const std::string shape = std::string(p.name) + " " + std::to_string(p.rows) + "x" + std::to_string(cols);
    tally.report(shape);
    tally_grouped.report(shape + " tiles of " + std::to_string(ts));
    std::printf("[kquant] moe_grouped    %-6s %s: %lld of %lld outputs differ from the per-slot kernel%s\n",
                std::string(gguf::type_name(p.w.type)).c_str(), p.name, (long long)grouped_diff,
                (long long)(n_slots * p.rows), exact ? "" : " (tensor cores: another summation order)");
    if (exact) {
      EXPECT_EQ(grouped_diff, 0) << p.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Mixes, CudaKQuantExperts,
                         ::testing::Values(MixCase{GgmlType::Q4_K, GgmlType::Q6_K}, MixCase{GgmlType::Q5_K, GgmlType::Q6_K},
                                           MixCase{GgmlType::Q3_K, GgmlType::Q5_K}, MixCase{GgmlType::Q2_K, GgmlType::Q4_K},
                                           MixCase{GgmlType::IQ4_XS, GgmlType::IQ4_XS},
                                           MixCase{GgmlType::Q4_K, GgmlType::Q8_0}, MixCase{GgmlType::Q4_0, GgmlType::Q6_K}),
                         [](const auto& i) {
                           return std::string(gguf::type_name(i.param.gate_up)) + "_" +
                                  std::string(gguf::type_name(i.param.down));
                         });

// A type neither backend computes (MXFP4 here; IQ1/IQ2/IQ3 and TQ alike) is refused at open on CUDA too, before a
// weight is read, naming the tensor and its type.
TEST(CudaKQuant, ATypeWithoutKernelsIsRefusedNamingTheTensor) {
  DF_REQUIRE_GPU();
  TinyModel m;
  m.retype_tensor = "blk.1.ffn_down_exps.weight";
  const auto dir = temp_dir("kquant_refusal");
  const std::string path = (dir / "m.gguf").string();
  ASSERT_TRUE(write_tiny_model(path, m).ok());
  auto r = engine::Model::open(path, {.n_ctx = 64, .backend = engine::Backend::kCuda});
  ASSERT_FALSE(r.ok());
  const std::string& e = r.error().message;
  std::printf("[kquant] refusal: %s\n", e.c_str());
  EXPECT_NE(e.find("blk.1.ffn_down_exps.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("mxfp4"), std::string::npos) << e;
}

// ---- throughput at Qwen3-30B-A3B's shapes, printed (GB/s of weights read), never asserted

TEST(CudaKQuantThroughput, DecodePrefillAndExperts) {
  DF_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_XS}) {
    const std::string tn(gguf::type_name(t));
    // Decode: one token through the q projection's shape and a slice of the output head's.
    for (int64_t rows : {int64_t(4096), int64_t(32768)}) {
      const HostMat w = random_mat(t, rows, 2048, 51);
      cuda::DeviceBuffer dw(w.bytes.size());
      dw.upload(w.bytes.data(), w.bytes.size());
      const auto x = random_floats(512 * 2048, 52);
      auto dx = cuda::to_device(x);
      cuda::DeviceBuffer xq(cuda::q8_scratch_bytes(t, 2048, 512)), dy(512 * rows * 4);
      cuda::quantize_q8_0({.x = dx.as<float>(), .y = xq.as<uint8_t>(), .n_rows = 1, .cols = 2048});
      cuda::DecodeMatvecArgs a{.n_parts = 1, .x = dx.as<float>(), .x_q8 = xq.as<uint8_t>(), .n_tok = 1,
                               .stream = stream};
      a.parts[0] = {.w = dmat(w, dw), .y = dy.as<float>()};
      const double ms = time_ms(30, [&] { cuda::decode_matvec(a); });
      const double gb = double(w.bytes.size()) / 1e6;
      // Prefill: 512 tokens, through the f16 tiles and (without their workspace) the int8 tensor cores.
      cuda::DeviceBuffer work(cuda::dequant_work_bytes(2048, 512));
      const double ms_tiles = time_ms(5, [&] {
        cuda::matmul({.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = 512, .y = dy.as<float>(),
                      .scratch = xq.as<uint8_t>(), .stream = stream, .dequant = work.as<uint8_t>()});
      });
      const double ms_mma = time_ms(5, [&] {
        cuda::matmul({.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = 512, .y = dy.as<float>(),
                      .scratch = xq.as<uint8_t>(), .stream = stream});
      });
      const double tflop = 2.0 * 512 * double(rows) * 2048 / 1e12;
      std::printf("[kquant-throughput] %-6s %lldx2048: decode %.4f ms (%.0f GB/s); prefill 512 tokens: f16 tiles "
                  "%.3f ms (%.1f TFLOP/s), int8 tensor cores %.3f ms (%.1f TOPS)\n",
                  tn.c_str(), (long long)rows, ms, gb / ms, ms_tiles, tflop / (ms_tiles / 1e3), ms_mma,
                  tflop / (ms_mma / 1e3));
    }
  }
  // Routed experts of one decode token: gate and up Q4_K, down Q6_K, 128 experts of 768 x 2048, 8 used.
  const int32_t X = 128;
  const int64_t E = 2048, F = 768;
  const int K = 8;
  const HostMat hg = random_mat(GgmlType::Q4_K, X * F, E, 53), hu = random_mat(GgmlType::Q4_K, X * F, E, 54);
  const HostMat hd = random_mat(GgmlType::Q6_K, X * E, F, 55);
  auto up = [](const HostMat& m) {
    cuda::DeviceBuffer b(m.bytes.size());
    b.upload(m.bytes.data(), m.bytes.size());
    return b;
  };
  cuda::DeviceBuffer dg = up(hg), du = up(hu), dd = up(hd);
  const model::Mat g{GgmlType::Q4_K, dg.as<uint8_t>(), E, F, hg.row_bytes};
  const model::Mat u{GgmlType::Q4_K, du.as<uint8_t>(), E, F, hu.row_bytes};
  const model::Mat d{GgmlType::Q6_K, dd.as<uint8_t>(), F, E, hd.row_bytes};
  ASSERT_TRUE(cuda::moe_decode_supported(g, u, d, 1, K));
  const std::vector<int32_t> ids = {3, 17, 29, 40, 64, 77, 100, 127};
  const auto wts = random_floats(K, 56, 0.0f, 1.0f);
  const auto x = random_floats(E, 57);
  auto dids = cuda::to_device(ids), dwts = cuda::to_device(wts), dx = cuda::to_device(x);
  cuda::DeviceBuffer xq(cuda::q8_scratch_bytes(GgmlType::Q4_K, E, 1)), act_q8(cuda::q8_scratch_bytes(GgmlType::Q4_K, F, K));
  cuda::DeviceBuffer out(E * 4);
  cuda::quantize_q8_0({.x = dx.as<float>(), .y = xq.as<uint8_t>(), .n_rows = 1, .cols = E});
  const double ms = time_ms(50, [&] {
    cuda::moe_decode_gate_up({.gate = g, .up = u, .gate_stride = F * hg.row_bytes, .up_stride = F * hu.row_bytes,
                              .n_expert = X, .ids = dids.as<int32_t>(), .n_tok = 1, .n_used = K,
                              .x_q8 = xq.as<uint8_t>(), .act_q8 = act_q8.as<uint8_t>()});
    cuda::moe_decode_down({.down = d, .down_stride = E * hd.row_bytes, .n_expert = X, .ids = dids.as<int32_t>(),
                           .weights = dwts.as<float>(), .n_tok = 1, .n_used = K, .act_q8 = act_q8.as<uint8_t>(),
                           .out = out.as<float>()});
  });
  const double gb = double(K) * (2 * F * hg.row_bytes + E * hd.row_bytes) / 1e6;
  std::printf("[kquant-throughput] routed experts q4_K/q4_K/q6_K, 8 of 128 (768 x 2048): %.4f ms, %.0f GB/s\n", ms,
              gb / ms);
}

}  // namespace
}  // namespace df::test
