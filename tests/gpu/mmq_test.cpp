// The int8 tensor-core products (mmq.cu) behind matmul() for Q4_0/Q8_0 batches of kMmaMinTokens or more and behind
// moe_matmul_grouped() with tiles of more than 8 slots (the piece types' kernels: kquant_test.cpp): against the CPU
// reference and against the warp-per-row dp4a kernels, on ragged shapes (rows not a multiple of the 64-row tile,
// token counts not a multiple of 32 or 64, rows whose block count is not a multiple of the 4-block stage, experts
// with 0, 1 and several tiles of slots), and every block tile shape forced in turn, which must give the same results
// bit for bit. Then the Qwen3-30B-A3B prefill
// shapes timed with CUDA events (printed, never asserted) for each tile shape, each checked on sampled outputs.
//
// Tolerance: the Q8_0 activations and the integer block dots are exact on both sides; the dp4a kernel scales each
// block as fma(d_w * d_a, float(dot), acc), the tensor-core kernel as fma(d_w * dot, d_a, acc) with d_w * dot rounded
// once (at most 2^-24 of the absolute sum over all blocks, below one step of the summation chains that
// sum_order_tolerance allows for), so every output is within sum_order_tolerance of the CPU's (10% slack for the
// activations' quantization in the absolute sum), and within the same bound of the dp4a kernel's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

#include "backend/cuda/mmq.cuh"
#include "diskformer/backend/cpu/ops.h"
#include "gpu/gpu_support.h"
#include "gpu/kernel_support.h"

namespace df::test {
namespace {

using gguf::GgmlType;

constexpr cuda::mmq::Tile kTiles[] = {{64, 32}, {64, 64}, {128, 32}, {128, 64}};

// The dequantized weights, once, for the tolerances' absolute sums.
std::vector<float> dequantized(const HostMat& w) {
  std::vector<float> d(w.rows * w.cols);
  for (int64_t r = 0; r < w.rows; ++r) cpu::get_row(w.mat(), r, d.data() + r * w.cols);
  return d;
}

double tolerance(const std::vector<float>& wd, int64_t cols, int64_t r, const float* x) {
  double s = 0;
  for (int64_t i = 0; i < cols; ++i) s += std::fabs(double(wd[r * cols + i]) * double(x[i]));
  return 1.1 * sum_order_tolerance(cols, s);
}

// The rows of experts [e * rows, (e + 1) * rows) of a stacked tensor as a matrix of its own.
HostMat expert_of(const HostMat& w, int64_t e, int64_t rows) {
  return {w.type, rows, w.cols, w.row_bytes,
          std::vector<uint8_t>(w.bytes.begin() + e * rows * w.row_bytes, w.bytes.begin() + (e + 1) * rows * w.row_bytes)};
}

struct Worst {
  double cpu = 0, dp4a = 0;  // the largest |difference| / tolerance seen
  size_t equal_dp4a = 0, n = 0;
};

struct DenseCase {
  GgmlType type;
  int64_t rows, cols, n_tok;
};

class CudaMmqDense : public ::testing::TestWithParam<DenseCase> {};

TEST_P(CudaMmqDense, MatchesCpuAndTheDp4aKernel) {
  DF_REQUIRE_GPU();
  const auto c = GetParam();
  ASSERT_GE(c.n_tok, cuda::kMmaMinTokens);
  const HostMat w = random_mat(c.type, c.rows, c.cols, 201);
  const auto x = random_floats(c.n_tok * c.cols, 202, -2.0f, 2.0f);
  std::vector<float> want(c.n_tok * c.rows);
  auto ctx = scalar_context();
  cpu::matmul(ctx, w.mat(), x.data(), c.n_tok, want.data());

  cuda::DeviceBuffer dw(w.bytes.size());
  dw.upload(w.bytes.data(), w.bytes.size());
  auto dx = cuda::to_device(x);
  cuda::DeviceBuffer y_mma(want.size() * 4), y_dp4a(want.size() * 4), y_q8(want.size() * 4);
  cuda::DeviceBuffer scratch(cuda::q8_scratch_bytes(c.type, c.cols, c.n_tok));
  // Outputs start as NaN so that an element the kernel never writes fails.
  DF_CUDA_CHECK(cudaMemset(y_mma.data(), 0xff, y_mma.size()));
  cuda::matmul({.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = c.n_tok, .y = y_mma.as<float>(),
                .scratch = scratch.as<uint8_t>()});
  const auto got = download<float>(y_mma, want.size());
  cuda::matmul({.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = c.n_tok, .y = y_dp4a.as<float>(),
                .scratch = scratch.as<uint8_t>(), .use_mma = false});
  const auto ref = download<float>(y_dp4a, want.size());

  const auto wd = dequantized(w);
  Worst worst;
  for (int64_t t = 0; t < c.n_tok; ++t)
    for (int64_t r = 0; r < c.rows; ++r) {
      const size_t i = t * c.rows + r;
      const double tol = tolerance(wd, c.cols, r, x.data() + t * c.cols);
      const double d_cpu = std::fabs(double(got[i]) - double(want[i]));
      const double d_ref = std::fabs(double(got[i]) - double(ref[i]));
      ASSERT_LE(d_cpu, tol) << "token " << t << " row " << r << " got " << got[i] << " cpu " << want[i];
      ASSERT_LE(d_ref, tol) << "token " << t << " row " << r << " got " << got[i] << " dp4a " << ref[i];
      worst.cpu = std::max(worst.cpu, d_cpu / tol);
      worst.dp4a = std::max(worst.dp4a, d_ref / tol);
      worst.equal_dp4a += got[i] == ref[i];
    }

  // Activations quantized beforehand (shared by q, k and v in the forward pass): the same results bit for bit.
  cuda::DeviceBuffer xq(cuda::q8_scratch_bytes(c.type, c.cols, c.n_tok));
  cuda::quantize_q8_0({.x = dx.as<float>(), .y = xq.as<uint8_t>(), .n_rows = c.n_tok, .cols = c.cols});
  cuda::matmul({.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = c.n_tok, .y = y_q8.as<float>(),
                .x_q8 = xq.as<uint8_t>()});
  EXPECT_EQ(download<float>(y_q8, want.size()), got);
  // Each tile shape: the same results bit for bit.
  const uint64_t q8_stride = uint64_t(c.cols / 32) * 34;
  for (const auto tile : kTiles) {
    DF_CUDA_CHECK(cudaMemset(y_q8.data(), 0xff, y_q8.size()));
    cuda::mmq::dense(dmat(w, dw), xq.as<uint8_t>(), q8_stride, c.n_tok, y_q8.as<float>(), nullptr, tile);
    EXPECT_EQ(download<float>(y_q8, want.size()), got) << "tile " << tile.rows << "x" << tile.tokens;
  }
  std::printf("[mmq] %s %lldx%lld n_tok %lld: worst diff %.3f of tolerance vs cpu, %.3f vs dp4a; %zu of %zu equal "
              "to dp4a\n",
              std::string(gguf::type_name(c.type)).c_str(), (long long)c.rows, (long long)c.cols, (long long)c.n_tok, worst.cpu,
              worst.dp4a, worst.equal_dp4a, want.size());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaMmqDense,
    ::testing::Values(
        // At the threshold; 3 blocks per row (one partial stage); rows past the 64-row tile.
        DenseCase{GgmlType::Q4_0, 67, 96, 16}, DenseCase{GgmlType::Q8_0, 67, 96, 16},
        // 17 tokens in one 32-token tile; 64 blocks per row.
        DenseCase{GgmlType::Q4_0, 130, 2048, 17}, DenseCase{GgmlType::Q8_0, 130, 2048, 17},
        // 33 tokens in one 64-token tile; 33 blocks per row (a last stage of 1 block).
        DenseCase{GgmlType::Q4_0, 64, 1056, 33}, DenseCase{GgmlType::Q8_0, 64, 1056, 33},
        // 100 tokens: 64 + 36; 23 blocks per row.
        DenseCase{GgmlType::Q4_0, 200, 736, 100}, DenseCase{GgmlType::Q8_0, 200, 736, 100},
        // A prefill batch of 512 over rows one past a tile multiple.
        DenseCase{GgmlType::Q4_0, 129, 512, 512}, DenseCase{GgmlType::Q8_0, 129, 512, 512}),
    [](const auto& i) {
      return std::string(gguf::type_name(i.param.type)) + "_" + std::to_string(i.param.rows) + "x" +
             std::to_string(i.param.cols) + "_tok" + std::to_string(i.param.n_tok);
    });

struct GroupedCase {
  GgmlType type;
  int32_t tile_slots;
};

class CudaMmqGrouped : public ::testing::TestWithParam<GroupedCase> {};

// 9 experts, 100 tokens, top-2: expert 0 takes 75 slots (several tiles, the last partial), expert 3 exactly one,
// expert 8 none; 100 rows (one full and one partial 64-row tile) of 288 columns (9 blocks: a partial last stage).
TEST_P(CudaMmqGrouped, MatchesCpuAndThePerSlotKernel) {
  DF_REQUIRE_GPU();
  const auto c = GetParam();
  const int64_t n_expert = 9, rows = 100, cols = 288, n_tok = 100;
  const int n_used = 2;
  const int64_t n_slots = n_tok * n_used;
  std::vector<int32_t> ids(n_slots);
  for (int64_t t = 0; t < n_tok; ++t) {
    ids[t * 2] = t < 75 ? 0 : int32_t(1 + t % 2);
    ids[t * 2 + 1] = t == 50 ? 3 : int32_t(4 + t % 4);
  }
  std::vector<int64_t> load(n_expert, 0);
  for (int32_t e : ids) ++load[e];
  ASSERT_EQ(load[0], 75);
  ASSERT_EQ(load[3], 1);
  ASSERT_EQ(load[8], 0);

  const HostMat w = random_mat(c.type, n_expert * rows, cols, 211);
  cuda::DeviceBuffer dw(w.bytes.size());
  dw.upload(w.bytes.data(), w.bytes.size());
  const model::Mat one{c.type, dw.as<uint8_t>(), cols, rows, w.row_bytes};
  const uint64_t stride = rows * w.row_bytes;
  auto dids = cuda::to_device(ids);

  // The plan: every slot once, grouped by expert in increasing order, ceil(load / tile_slots) tiles per expert.
  const int64_t max_tiles = cuda::moe_max_tiles(n_slots, n_expert, c.tile_slots);
  cuda::DeviceBuffer order(n_slots * 4), tiles((1 + 3 * max_tiles) * 4);
  cuda::moe_plan({.ids = dids.as<int32_t>(), .n_slots = n_slots, .n_expert = int32_t(n_expert),
                  .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>(), .tile_slots = c.tile_slots});
  const auto ord = download<int32_t>(order, n_slots);
  const auto til = download<int32_t>(tiles, 1 + 3 * max_tiles);
  int64_t want_tiles = 0;
  for (int64_t l : load) want_tiles += (l + c.tile_slots - 1) / c.tile_slots;
  ASSERT_EQ(til[0], want_tiles);
  int64_t covered = 0;
  int32_t last_e = -1;
  for (int32_t i = 0; i < til[0]; ++i) {
    const int32_t e = til[1 + 3 * i], first = til[2 + 3 * i], cnt = til[3 + 3 * i];
    ASSERT_EQ(first, covered);
    ASSERT_TRUE(cnt >= 1 && cnt <= c.tile_slots) << cnt;
    ASSERT_GE(e, last_e);
    last_e = e;
    for (int32_t j = 0; j < cnt; ++j) ASSERT_EQ(ids[ord[first + j]], e);
    covered += cnt;
  }
  ASSERT_EQ(covered, n_slots);

  auto ctx = scalar_context();
  std::vector<HostMat> experts;
  std::vector<std::vector<float>> deq;
  for (int64_t e = 0; e < n_expert; ++e) {
    experts.push_back(expert_of(w, e, rows));
    deq.push_back(dequantized(experts.back()));
  }
  for (bool per_slot : {false, true}) {
    const int64_t n_in = per_slot ? n_slots : n_tok;
    const auto x = random_floats(n_in * cols, per_slot ? 212 : 213, -2.0f, 2.0f);
    auto dx = cuda::to_device(x);
    const uint64_t out_bytes = n_slots * rows * 4;
    cuda::DeviceBuffer y_mma(out_bytes), y_slot(out_bytes), y_q8(out_bytes);
    cuda::DeviceBuffer scratch(cuda::q8_scratch_bytes(c.type, cols, n_slots));
    DF_CUDA_CHECK(cudaMemset(y_mma.data(), 0xff, out_bytes));  // NaN: a slot never written fails
    const cuda::MoeGroupedMatmulArgs args{.w = one, .expert_stride = stride, .n_expert = int32_t(n_expert),
                                          .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>(),
                                          .n_slots = n_slots, .n_used = n_used, .x = dx.as<float>(),
                                          .x_per_slot = per_slot, .y = y_mma.as<float>(),
                                          .scratch = scratch.as<uint8_t>(), .tile_slots = c.tile_slots};
    cuda::moe_matmul_grouped(args);
    const auto got = download<float>(y_mma, n_slots * rows);
    cuda::moe_matmul({.w = one, .expert_stride = stride, .n_expert = int32_t(n_expert), .ids = dids.as<int32_t>(),
                      .n_tok = n_tok, .n_used = n_used, .x = dx.as<float>(), .x_per_slot = per_slot,
                      .y = y_slot.as<float>(), .scratch = scratch.as<uint8_t>()});
    const auto ref = download<float>(y_slot, n_slots * rows);

    Worst worst;
    for (int64_t v = 0; v < n_slots; ++v) {
      const int32_t e = ids[v];
      const float* xv = x.data() + (per_slot ? v : v / n_used) * cols;
      std::vector<float> want(rows);
      cpu::matmul(ctx, experts[e].mat(), xv, 1, want.data());
      for (int64_t r = 0; r < rows; ++r) {
        const size_t i = v * rows + r;
        const double tol = tolerance(deq[e], cols, r, xv);
        const double d_cpu = std::fabs(double(got[i]) - double(want[r]));
        const double d_ref = std::fabs(double(got[i]) - double(ref[i]));
        ASSERT_LE(d_cpu, tol) << "slot " << v << " expert " << e << " row " << r << " per_slot " << per_slot
                              << " got " << got[i] << " cpu " << want[r];
        ASSERT_LE(d_ref, tol) << "slot " << v << " expert " << e << " row " << r << " per_slot " << per_slot
                              << " got " << got[i] << " per-slot kernel " << ref[i];
        worst.cpu = std::max(worst.cpu, d_cpu / tol);
        worst.dp4a = std::max(worst.dp4a, d_ref / tol);
        worst.equal_dp4a += got[i] == ref[i];
      }
    }

    // The input quantized beforehand and read by index: the same results bit for bit.
    cuda::DeviceBuffer xq(cuda::q8_scratch_bytes(c.type, cols, n_in));
    cuda::quantize_q8_0({.x = dx.as<float>(), .y = xq.as<uint8_t>(), .n_rows = n_in, .cols = cols});
    cuda::MoeGroupedMatmulArgs pre = args;
    pre.x = nullptr;
    pre.scratch = nullptr;
    pre.y = y_q8.as<float>();
    pre.x_q8 = xq.as<uint8_t>();
    cuda::moe_matmul_grouped(pre);
    EXPECT_EQ(download<float>(y_q8, n_slots * rows), got) << "per_slot " << per_slot;
    // Each tile shape that holds a plan tile (items merge 64 / tile_slots or 32 / tile_slots plan tiles): the same
    // results bit for bit. Their 64-row tiles are the piece kernel's, the 128-row ones mmq.cu's own.
    for (const auto tile : kTiles) {
      if (c.tile_slots > tile.tokens) continue;
      DF_CUDA_CHECK(cudaMemset(y_q8.data(), 0xff, out_bytes));
      cuda::mmq::grouped({.w = one, .expert_stride = stride, .n_expert = int32_t(n_expert),
                          .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>(), .max_tiles = max_tiles,
                          .tile_slots = c.tile_slots, .act = xq.as<uint8_t>(), .act_stride = uint64_t(cols / 32) * 34,
                          .act_div = per_slot ? 1 : n_used, .y = y_q8.as<float>(), .tile = tile});
      EXPECT_EQ(download<float>(y_q8, n_slots * rows), got)
          << "per_slot " << per_slot << " tile " << tile.rows << "x" << tile.tokens;
    }
    std::printf("[mmq grouped] %s tile %d per_slot %d: worst diff %.3f of tolerance vs cpu, %.3f vs per-slot dp4a; "
                "%zu of %lld equal to dp4a\n",
                std::string(gguf::type_name(c.type)).c_str(), c.tile_slots, int(per_slot), worst.cpu, worst.dp4a, worst.equal_dp4a,
                (long long)(n_slots * rows));
  }
}

INSTANTIATE_TEST_SUITE_P(Tiles, CudaMmqGrouped,
                         ::testing::Values(GroupedCase{GgmlType::Q4_0, 32}, GroupedCase{GgmlType::Q8_0, 32},
                                           GroupedCase{GgmlType::Q4_0, 16}, GroupedCase{GgmlType::Q4_0, 64},
                                           GroupedCase{GgmlType::Q8_0, 64}, GroupedCase{GgmlType::Q8_0, 12}),
                         [](const auto& i) {
                           return std::string(gguf::type_name(i.param.type)) + "_tile" +
                                  std::to_string(i.param.tile_slots);
                         });

TEST(CudaMmq, TileSlotsPerType) {
  EXPECT_EQ(cuda::moe_tile_slots(GgmlType::Q4_0), 32);
  EXPECT_EQ(cuda::moe_tile_slots(GgmlType::Q8_0), 32);
  EXPECT_EQ(cuda::moe_tile_slots(GgmlType::F16), 8);
  EXPECT_EQ(cuda::moe_tile_slots(GgmlType::BF16), 8);
  EXPECT_EQ(cuda::moe_tile_slots(GgmlType::F32), 8);
  // Larger tiles never need more tile records than the default plan buffer holds.
  for (int32_t ts : {8, 16, 32, 64}) EXPECT_LE(cuda::moe_max_tiles(4096, 128, ts), cuda::moe_max_tiles(4096, 128));
}

// ---- Throughput at the Qwen3-30B-A3B prefill shapes (512 tokens), printed for the benchmark notes.

// Sampled outputs y[v][r] (v: an output row of `rows` values computed from input row xv) against the CPU.
void check_sample(const HostMat& w, int64_t row_offset, const float* xv, const float* yv,
                  std::initializer_list<int64_t> sample) {
  auto ctx = scalar_context();
  for (int64_t r : sample) {
    const HostMat one = expert_of(w, row_offset + r, 1);
    float want = 0;
    cpu::matmul(ctx, one.mat(), xv, 1, &want);
    const double tol = 1.1 * sum_order_tolerance(w.cols, abs_dot(one, 0, xv));
    ASSERT_NEAR(yv[r], want, tol) << "row " << r;
  }
}

// Dense products of a 512-token prompt, per tile shape (64-row tiles are the piece kernel's, 128-row ones mmq.cu's).
void time_dense(GgmlType type, std::initializer_list<std::pair<int64_t, int64_t>> shapes) {
  const int64_t n_tok = 512;
  const std::string tn(gguf::type_name(type));
  for (auto [rows, cols] : shapes) {
    const HostMat w = type == GgmlType::Q4_0 ? random_q4(rows, cols, 221) : random_mat(type, rows, cols, 221);
    cuda::DeviceBuffer dw(w.bytes.size());
    dw.upload(w.bytes.data(), w.bytes.size());
    const auto x = random_floats(n_tok * cols, 222);
    auto dx = cuda::to_device(x);
    cuda::DeviceBuffer dy(n_tok * rows * 4), xq(cuda::q8_scratch_bytes(type, cols, n_tok));
    cuda::quantize_q8_0({.x = dx.as<float>(), .y = xq.as<uint8_t>(), .n_rows = n_tok, .cols = cols});
    const cuda::MatmulArgs args{.w = dmat(w, dw), .x = dx.as<float>(), .n_tok = n_tok, .y = dy.as<float>(),
                                .x_q8 = xq.as<uint8_t>()};
    cuda::MatmulArgs old = args;
    old.use_mma = false;
    const double ms_old = time_ms(5, [&] { cuda::matmul(old); });
    const double ms = time_ms(20, [&] { cuda::matmul(args); });
    const auto got = download<float>(dy, n_tok * rows);
    for (int64_t t : {int64_t(0), int64_t(333), n_tok - 1})
      check_sample(w, 0, x.data() + t * cols, got.data() + t * rows, {0, 1, 63, 64, rows / 2 + 7, rows - 1});
    const double ops = 2.0 * double(rows) * double(cols) * double(n_tok);
    std::printf("[throughput] mmq %s %lldx%lld n_tok %lld (activations pre-quantized): %.3f ms, %.1f TOPS, %.0f "
                "GB/s of weights; dp4a kernel %.3f ms (%.1f TOPS), %.1fx\n",
                tn.c_str(), (long long)rows, (long long)cols, (long long)n_tok, ms, ops / ms / 1e9,
                double(w.bytes.size()) / ms / 1e6, ms_old, ops / ms_old / 1e9, ms_old / ms);
    for (const auto tile : kTiles) {
      const double ms_t = time_ms(20, [&] {
        cuda::mmq::dense(dmat(w, dw), xq.as<uint8_t>(), uint64_t(cols / 32) * 34, n_tok, dy.as<float>(), nullptr, tile);
      });
      EXPECT_EQ(download<float>(dy, n_tok * rows), got) << tn << " tile " << tile.rows << "x" << tile.tokens;
      std::printf("[throughput]   %s tile %dx%d: %.3f ms, %.1f TOPS\n", tn.c_str(), tile.rows, tile.tokens, ms_t,
                  ops / ms_t / 1e9);
    }
  }
}

TEST(CudaMmqThroughput, DensePrefill512) {
  DF_REQUIRE_GPU();
  // q, wo and k / v of Qwen3-30B-A3B in Q4_0; Qwen3.6-35B-A3B's DeltaNet qkv, gate and output (and its gated
  // attention's q) in Q8_0.
  time_dense(GgmlType::Q4_0, {{4096, 2048}, {2048, 4096}, {512, 2048}});
  time_dense(GgmlType::Q8_0, {{8192, 2048}, {4096, 2048}, {2048, 4096}});
}

// One MoE layer's routed experts at prefill, 512 tokens x top-8 (distinct random experts per token): gate (ff x 2048,
// input per token) and down (2048 x ff, input per slot); plan + quantization + product timed. Qwen3-30B-A3B's 128
// experts of 768 in Q4_0 and in the types of a Q4_K_M file's experts (Q4_K, Q6_K); Qwen3.6-35B-A3B's 256 of 512 in
// Q8_0 and Q4_0 (16 slots an expert on average: the weights' reads bound the products).
void time_grouped_experts(int64_t X, int64_t ff, std::initializer_list<GgmlType> types) {
  const int64_t n_tok = 512;
  const int K = 8;
  const int64_t n_slots = n_tok * K;
  std::mt19937 rng(231);
  std::vector<int32_t> ids(n_slots);
  for (int64_t t = 0; t < n_tok; ++t) {
    std::vector<int32_t> all(X);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), K, ids.begin() + t * K);
  }
  auto dids = cuda::to_device(ids);
  std::vector<int32_t> distinct = ids;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (GgmlType type : types)
  for (auto [rows, cols, per_slot] :
       {std::tuple<int64_t, int64_t, bool>{ff, 2048, false}, std::tuple<int64_t, int64_t, bool>{2048, ff, true}}) {
    const bool pieces = type != GgmlType::Q4_0 && type != GgmlType::Q8_0;
    const HostMat w = type == GgmlType::Q4_0 ? random_q4(X * rows, cols, 232) : random_mat(type, X * rows, cols, 232);
    cuda::DeviceBuffer dw(w.bytes.size());
    dw.upload(w.bytes.data(), w.bytes.size());
    const model::Mat one{type, dw.as<uint8_t>(), cols, rows, w.row_bytes};
    const uint64_t stride = uint64_t(rows) * w.row_bytes;
    const int64_t n_in = per_slot ? n_slots : n_tok;
    const auto x = random_floats(n_in * cols, 233);
    auto dx = cuda::to_device(x);
    cuda::DeviceBuffer dy(n_slots * rows * 4), scratch(cuda::q8_scratch_bytes(type, cols, n_slots));
    cuda::DeviceBuffer gathered(n_slots * cols * 4), order(n_slots * 4);
    cuda::DeviceBuffer tiles((1 + 3 * cuda::moe_max_tiles(n_slots, X)) * 4);
    auto run = [&](int32_t ts) {
      cuda::moe_plan({.ids = dids.as<int32_t>(), .n_slots = n_slots, .n_expert = int32_t(X),
                      .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>(), .tile_slots = ts});
      cuda::moe_matmul_grouped({.w = one, .expert_stride = stride, .n_expert = int32_t(X),
                                .order = order.as<int32_t>(), .tiles = tiles.as<int32_t>(), .n_slots = n_slots,
                                .n_used = K, .x = dx.as<float>(), .x_per_slot = per_slot,
                                .gathered = gathered.as<float>(), .y = dy.as<float>(),
                                .scratch = scratch.as<uint8_t>(), .tile_slots = ts});
    };
    const int32_t ts = cuda::moe_tile_slots(type);
    const double ms_old = time_ms(3, [&] { run(8); });
    const double ms = time_ms(10, [&] { run(ts); });
    const auto got = download<float>(dy, n_slots * rows);
    // The piece types' reference takes the dequantized rows (kquant_test.cpp); the CPU's products round their
    // activations in blocks of 256.
    if (!pieces)
      for (int64_t v : {int64_t(0), int64_t(1234), n_slots - 1})
        check_sample(w, int64_t(ids[v]) * rows, x.data() + (per_slot ? v : v / K) * cols,
                     got.data() + v * rows, {0, 5, 64, rows - 1});
    const double ops = 2.0 * double(n_slots) * double(rows) * double(cols);
    const double bytes = double(distinct.size()) * double(stride);
    const std::string tn(gguf::type_name(type));
    std::printf("[throughput] mmq grouped %s %lld experts %lldx%lld top-%d n_tok %lld %s (tile %d, plan + quantize "
                "+ product): %.3f ms, %.1f TOPS, %.0f GB/s of distinct expert weights; 8-slot dp4a tiles %.3f ms "
                "(%.1f TOPS), %.1fx\n",
                tn.c_str(), (long long)X, (long long)rows, (long long)cols, K, (long long)n_tok,
                per_slot ? "input per slot" : "input per token", ts, ms, ops / ms / 1e9, bytes / ms / 1e6, ms_old,
                ops / ms_old / 1e9, ms_old / ms);
    // The product alone (plan and quantized input ready), per tile shape.
    cuda::quantize_q8_0({.x = dx.as<float>(), .y = scratch.as<uint8_t>(), .n_rows = n_in, .cols = cols});
    for (const auto tile : kTiles) {
      if (pieces && tile.rows != 64) continue;
      const double ms_t = time_ms(20, [&] {
        cuda::mmq::grouped({.w = one, .expert_stride = stride, .n_expert = int32_t(X), .order = order.as<int32_t>(),
                            .tiles = tiles.as<int32_t>(), .max_tiles = cuda::moe_max_tiles(n_slots, X, ts),
                            .tile_slots = ts, .act = scratch.as<uint8_t>(), .act_stride = uint64_t(cols / 32) * 34,
                            .act_div = per_slot ? 1 : K, .y = dy.as<float>(), .tile = tile});
      });
      EXPECT_EQ(download<float>(dy, n_slots * rows), got) << tn << " tile " << tile.rows << "x" << tile.tokens;
      std::printf("[throughput]   %s product only, tile %dx%d: %.3f ms, %.1f TOPS, %.0f GB/s of distinct expert "
                  "weights\n", tn.c_str(), tile.rows, tile.tokens, ms_t, ops / ms_t / 1e9, bytes / ms_t / 1e6);
    }
  }
}

TEST(CudaMmqThroughput, GroupedExpertsPrefill512) {
  DF_REQUIRE_GPU();
  time_grouped_experts(128, 768, {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K});
  time_grouped_experts(256, 512, {GgmlType::Q8_0, GgmlType::Q4_0});
}

}  // namespace
}  // namespace df::test
