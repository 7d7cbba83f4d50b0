// Every SIMD kernel table against the scalar reference (bit-identical by construction, see kernels.h), and the
// scalar reference against plain double-precision math.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "diskformer/backend/cpu/kernels.h"
#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cpu/thread_pool.h"

namespace df::cpu {
namespace {

std::vector<const Kernels*> simd_tables() {
  std::vector<const Kernels*> out;
  if (auto k = avx2_kernels()) out.push_back(k);
  if (auto k = avx512_kernels()) out.push_back(k);
  return out;
}

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<BlockQ4_0> random_q4_0(size_t blocks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<BlockQ4_0> b(blocks);
  for (auto& x : b) {
    x.d = f32_to_f16(0.001f + float(rng() % 1000) * 1e-4f);
    for (auto& q : x.qs) q = uint8_t(rng());
  }
  return b;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

const int64_t kSizes[] = {32, 64, 96, 256, 2048, 4096 + 32};

TEST(Kernels, BestIsChosen) {
  EXPECT_NE(best_kernels().name, nullptr);
  std::printf("[kernels] best table on this CPU: %s\n", best_kernels().name);
}

TEST(Kernels, QuantizeQ8_0MatchesScalar) {
  const Kernels& s = scalar_kernels();
  for (const Kernels* k : simd_tables())
    for (int64_t n : kSizes) {
      auto x = randn(size_t(n), uint64_t(n));
      x[5] = 0.0f;
      std::vector<float> zeros(32, 0.0f);
      std::vector<BlockQ8_0> a(size_t(n / 32)), b(size_t(n / 32));
      s.quantize_q8_0(x.data(), a.data(), n);
      k->quantize_q8_0(x.data(), b.data(), n);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(BlockQ8_0))) << k->name << " n=" << n;
      // An all-zero block quantizes to zeros with d = 0.
      BlockQ8_0 z;
      k->quantize_q8_0(zeros.data(), &z, 32);
      EXPECT_EQ(z.d, 0);
      for (auto q : z.qs) EXPECT_EQ(q, 0);
    }
}

TEST(Kernels, QuantizeQ8_0RoundsHalfToEvenWithD127) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // amax 127: d = 1, q = x exactly, ties round to even
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 1.4999f;
  BlockQ8_0 b;
  scalar_kernels().quantize_q8_0(x.data(), &b, 32);
  EXPECT_EQ(f16_to_f32(b.d), 1.0f);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], -4);
  EXPECT_EQ(b.qs[3], 1);
}

TEST(Kernels, QuantizedDotsMatchScalarAndReference) {
  const Kernels& s = scalar_kernels();
  for (int64_t n : kSizes) {
    auto w4 = random_q4_0(size_t(n / 32), uint64_t(n) + 1);
    auto x = randn(size_t(n), uint64_t(n) + 2);
    std::vector<BlockQ8_0> a(size_t(n / 32)), w8(size_t(n / 32));
    s.quantize_q8_0(x.data(), a.data(), n);
    auto y = randn(size_t(n), uint64_t(n) + 3);
    s.quantize_q8_0(y.data(), w8.data(), n);
    // Reference: dequantize both sides and sum in double.
    double ref4 = 0, ref8 = 0;
    for (int64_t b = 0; b < n / 32; ++b)
      for (int i = 0; i < 32; ++i) {
        const int q4 = i < 16 ? (w4[b].qs[i] & 15) - 8 : (w4[b].qs[i - 16] >> 4) - 8;
        const double av = double(a[b].qs[i]) * f16_to_f32(a[b].d);
        ref4 += double(q4) * f16_to_f32(w4[b].d) * av;
        ref8 += double(w8[b].qs[i]) * f16_to_f32(w8[b].d) * av;
      }
    const float s4 = s.dot_q4_0_q8_0(n, w4.data(), a.data());
    const float s8 = s.dot_q8_0_q8_0(n, w8.data(), a.data());
    EXPECT_NEAR(s4, ref4, 1e-4 * (1 + std::fabs(ref4))) << n;
    EXPECT_NEAR(s8, ref8, 1e-4 * (1 + std::fabs(ref8))) << n;
    // Four activation rows at once give each row's single result.
    std::vector<std::vector<BlockQ8_0>> rows(4, std::vector<BlockQ8_0>(size_t(n / 32)));
    const BlockQ8_0* a4[4];
    for (int t = 0; t < 4; ++t) {
      auto v = randn(size_t(n), uint64_t(n) * 7 + uint64_t(t));
      s.quantize_q8_0(v.data(), rows[size_t(t)].data(), n);
      a4[t] = rows[size_t(t)].data();
    }
    std::vector<const Kernels*> all = simd_tables();
    all.push_back(&s);
    for (const Kernels* k : all) {
      float o4[4], o8[4];
      k->dot4_q4_0_q8_0(n, w4.data(), a4, o4);
      k->dot4_q8_0_q8_0(n, w8.data(), a4, o8);
      for (int t = 0; t < 4; ++t) {
        EXPECT_EQ(bits(o4[t]), bits(s.dot_q4_0_q8_0(n, w4.data(), a4[t]))) << k->name << " n=" << n;
        EXPECT_EQ(bits(o8[t]), bits(s.dot_q8_0_q8_0(n, w8.data(), a4[t]))) << k->name << " n=" << n;
      }
    }
    for (const Kernels* k : simd_tables()) {
      EXPECT_EQ(bits(s4), bits(k->dot_q4_0_q8_0(n, w4.data(), a.data()))) << k->name << " n=" << n;
      EXPECT_EQ(bits(s8), bits(k->dot_q8_0_q8_0(n, w8.data(), a.data()))) << k->name << " n=" << n;
    }
  }
}

TEST(Kernels, FloatDotsMatchScalarAndReference) {
  const Kernels& s = scalar_kernels();
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(33), int64_t(64), int64_t(1000), int64_t(4096)}) {
    auto w = randn(size_t(n), uint64_t(n) + 10), a = randn(size_t(n), uint64_t(n) + 11);
    std::vector<uint16_t> wh(static_cast<size_t>(n)), ah(wh.size()), wb(wh.size()), ab(wh.size());
    s.to_f16(w.data(), wh.data(), n);
    s.to_f16(a.data(), ah.data(), n);
    s.to_bf16(w.data(), wb.data(), n);
    s.to_bf16(a.data(), ab.data(), n);
    double r32 = 0, r16 = 0, rb = 0;
    for (int64_t i = 0; i < n; ++i) {
      r32 += double(w[i]) * a[i];
      r16 += double(f16_to_f32(wh[i])) * f16_to_f32(ah[i]);
      rb += double(bf16_to_f32(wb[i])) * bf16_to_f32(ab[i]);
    }
    const float s32 = s.dot_f32(n, w.data(), a.data());
    const float s16 = s.dot_f16(n, wh.data(), ah.data());
    const float sb = s.dot_bf16(n, wb.data(), ab.data());
    EXPECT_NEAR(s32, r32, 1e-4 * std::sqrt(double(n)));
    EXPECT_NEAR(s16, r16, 1e-4 * std::sqrt(double(n)));
    EXPECT_NEAR(sb, rb, 1e-4 * std::sqrt(double(n)));
    for (const Kernels* k : simd_tables()) {
      std::vector<uint16_t> kh(static_cast<size_t>(n)), kb(kh.size());
      k->to_f16(w.data(), kh.data(), n);
      k->to_bf16(w.data(), kb.data(), n);
      EXPECT_EQ(kh, wh) << k->name;
      EXPECT_EQ(kb, wb) << k->name;
      EXPECT_EQ(bits(s32), bits(k->dot_f32(n, w.data(), a.data()))) << k->name << " n=" << n;
      EXPECT_EQ(bits(s16), bits(k->dot_f16(n, wh.data(), ah.data()))) << k->name << " n=" << n;
      EXPECT_EQ(bits(sb), bits(k->dot_bf16(n, wb.data(), ab.data()))) << k->name << " n=" << n;
    }
  }
}

TEST(Kernels, HalfAccumulatorsMatchScalar) {
  const Kernels& s = scalar_kernels();
  for (int64_t n : {int64_t(5), int64_t(32), int64_t(128), int64_t(131)}) {
    auto x = randn(size_t(n), 7), y = randn(size_t(n), 8);
    std::vector<uint16_t> xh(static_cast<size_t>(n)), yh(xh.size());
    s.to_f16(x.data(), xh.data(), n);
    s.to_f16(y.data(), yh.data(), n);
    auto ref = yh;
    s.mad_f16(n, ref.data(), xh.data(), 0.37f);
    s.scale_f16(n, ref.data(), 0.81f);
    for (int64_t i = 0; i < n; ++i) {
      const float want = f16_to_f32(f32_to_f16(f16_to_f32(f32_to_f16(
                             std::fma(f16_to_f32(xh[i]), 0.37f, f16_to_f32(yh[i])))) * 0.81f));
      EXPECT_EQ(f16_to_f32(ref[i]), want);
    }
    for (const Kernels* k : simd_tables()) {
      auto got = yh;
      k->mad_f16(n, got.data(), xh.data(), 0.37f);
      k->scale_f16(n, got.data(), 0.81f);
      EXPECT_EQ(got, ref) << k->name << " n=" << n;
    }
  }
}

TEST(Kernels, HalfToFloatIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 v;
    const uint16_t hh = uint16_t(h);
    std::memcpy(&v, &hh, 2);
    const float want = static_cast<float>(v), got = f16_to_f32(hh);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(bits(got), bits(want)) << h;
    }
  }
}

TEST(Kernels, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // halfway between 1 and the next half: even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);  // halfway, rounds up to even
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);            // overflows to infinity
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
}

TEST(ThreadPool, RunsEveryTaskOnceAcrossManyJobs) {
  ThreadPool pool(3);
  for (int job = 0; job < 200; ++job) {
    const int64_t n = 1 + job % 37;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.run(n, [&](int64_t t) { hits[size_t(t)].fetch_add(1); });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "job " << job;
  }
}

TEST(Ops, MatmulIsIndependentOfThreadsAndBatch) {
  // A Q4_0 matrix of 48 rows x 128 columns against 6 activation rows (a group of four and a tail of two).
  auto blocks = random_q4_0(48 * 4, 99);
  model::Mat w{gguf::GgmlType::Q4_0, reinterpret_cast<const uint8_t*>(blocks.data()), 128, 48, 4 * sizeof(BlockQ4_0)};
  auto x = randn(6 * 128, 5);
  std::vector<float> y1(6 * 48), y3(6 * 48), one(48);
  Context c1;
  matmul(c1, w, x.data(), 6, y1.data());
  ThreadPool pool(3);
  Context c3;
  c3.pool = &pool;
  matmul(c3, w, x.data(), 6, y3.data());
  EXPECT_EQ(y1, y3);
  for (int t = 0; t < 6; ++t) {
    matmul(c1, w, x.data() + t * 128, 1, one.data());
    EXPECT_EQ(std::vector<float>(y1.begin() + t * 48, y1.begin() + (t + 1) * 48), one) << "token " << t;
  }
}

TEST(Ops, RopeRotatesPairsByStyle) {
  // One head of 4 dims at position 1 with base 1: every pair turns by 1 radian.
  std::vector<float> a = {1, 0, 1, 0}, b = {1, 1, 0, 0};
  rope(a.data(), 1, 4, 4, 1, 1.0f, model::RopeStyle::kNormal);  // pairs (0,1), (2,3)
  rope(b.data(), 1, 4, 4, 1, 1.0f, model::RopeStyle::kNeox);    // pairs (0,2), (1,3)
  EXPECT_FLOAT_EQ(a[0], std::cos(1.0f));
  EXPECT_FLOAT_EQ(a[1], std::sin(1.0f));
  EXPECT_FLOAT_EQ(b[0], std::cos(1.0f));
  EXPECT_FLOAT_EQ(b[2], std::sin(1.0f));
  EXPECT_FLOAT_EQ(b[1], std::cos(1.0f));
  EXPECT_FLOAT_EQ(b[3], std::sin(1.0f));
}

}  // namespace
}  // namespace df::cpu
