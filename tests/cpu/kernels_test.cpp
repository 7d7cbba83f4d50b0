// Every SIMD kernel table against the scalar reference (bit-identical by construction, see kernels.h), and the
// scalar reference against plain double-precision math.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/exp_approx.h"
#include "cpu/kernel_support.h"
#include "diskformer/backend/cpu/dequant.h"
#include "diskformer/backend/cpu/kernels.h"
#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cpu/thread_pool.h"
#include "support/random.h"

namespace df::cpu {
namespace {

using test::randn;

std::vector<BlockQ4_0> random_q4_0(size_t blocks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<BlockQ4_0> b(blocks);
  for (auto& x : b) {
    x.d = f32_to_f16(0.001f + float(rng() % 1000) * 1e-4f);
    for (auto& q : x.qs) q = uint8_t(rng());
  }
  return b;
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

TEST(Kernels, QuantizeQ8_1AndQ8_KMatchScalar) {
  const Kernels& s = scalar_kernels();
  for (int64_t n : {int64_t(256), int64_t(512), int64_t(4096)}) {
    auto x = randn(size_t(n), uint64_t(n) + 20);
    x[7] = 0.0f;
    std::fill(x.begin() + 256, x.begin() + std::min<int64_t>(n, 512), 0.0f);  // an all-zero 256-block
    std::vector<BlockQ8_1> a1(size_t(n / 32)), b1(a1.size());
    std::vector<BlockQ8_K> ak(size_t(n / 256)), bk(ak.size());
    s.quantize_q8_1(x.data(), a1.data(), n);
    s.quantize_q8_k(x.data(), ak.data(), n);
    for (const Kernels* k : simd_tables()) {
      k->quantize_q8_1(x.data(), b1.data(), n);
      k->quantize_q8_k(x.data(), bk.data(), n);
      EXPECT_EQ(0, std::memcmp(a1.data(), b1.data(), a1.size() * sizeof(BlockQ8_1))) << k->name << " n=" << n;
      EXPECT_EQ(0, std::memcmp(ak.data(), bk.data(), ak.size() * sizeof(BlockQ8_K))) << k->name << " n=" << n;
    }
    // Q8_1 is Q8_0 plus the block sum; Q8_K's bsums are its 16-value sums.
    std::vector<BlockQ8_0> a0(a1.size());
    s.quantize_q8_0(x.data(), a0.data(), n);
    for (size_t b = 0; b < a1.size(); ++b) {
      ASSERT_EQ(a1[b].d, a0[b].d);
      ASSERT_EQ(0, std::memcmp(a1[b].qs, a0[b].qs, 32));
      int sum = 0;
      for (int8_t q : a1[b].qs) sum += q;
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[b * 32 + size_t(i)]));
      EXPECT_EQ(a1[b].s, f32_to_f16(amax / 127.0f * float(sum))) << b;  // the sum scaled before d is rounded
    }
    for (const BlockQ8_K& b : ak)
      for (int j = 0; j < 16; ++j) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += b.qs[16 * j + i];
        ASSERT_EQ(b.bsums[j], sum);
      }
    if (n >= 512) {
      EXPECT_EQ(ak[1].d, 0.0f);  // the zero block
      for (int8_t q : ak[1].qs) EXPECT_EQ(q, 0);
    }
  }
}

TEST(Kernels, Q8_KTakesItsSignFromTheFirstLargestValue) {
  std::vector<float> x(256, 0.0f);
  x[3] = -2.0f;
  x[9] = 2.0f;  // as large, later: the scale follows x[3]
  x[20] = 1.0f;
  BlockQ8_K b;
  scalar_kernels().quantize_q8_k(x.data(), &b, 256);
  EXPECT_EQ(b.d, 1.0f / (-127.0f / -2.0f));
  EXPECT_EQ(b.qs[3], -127);
  EXPECT_EQ(b.qs[9], 127);
  EXPECT_EQ(b.qs[20], 64);  // 63.5 rounds to even
  x[3] = 2.0f;
  x[9] = -2.0f;
  scalar_kernels().quantize_q8_k(x.data(), &b, 256);
  EXPECT_LT(b.d, 0.0f);      // -127 / 2: codes carry the opposite sign
  EXPECT_EQ(b.qs[3], -127);
  EXPECT_EQ(b.qs[9], 127);   // 127 at most
}

// The orders a type's rows take (kernels.h): one activation row (llama.cpp's vec_dot), interleaved matrices, and
// IQ4_NL's batch order (tinyBLAS).
enum class Order { kRow, kX8, kBatch };

// One table's dot product of a weight row of type t against an activation row in order o.
float table_dot(const Kernels& k, gguf::GgmlType t, Order o, int64_t n, const uint8_t* w, const uint8_t* a) {
  using gguf::GgmlType;
  const bool x8 = o == Order::kX8;
  switch (t) {
    case GgmlType::Q4_0:
      return (x8 ? k.dot_q4_0_q8_0_x8 : k.dot_q4_0_q8_0)(n, reinterpret_cast<const BlockQ4_0*>(w),
                                                          reinterpret_cast<const BlockQ8_0*>(a));
    case GgmlType::Q4_1:
      return k.dot_q4_1_q8_1(n, reinterpret_cast<const BlockQ4_1*>(w), reinterpret_cast<const BlockQ8_1*>(a));
    case GgmlType::Q5_0:
      return k.dot_q5_0_q8_0(n, reinterpret_cast<const BlockQ5_0*>(w), reinterpret_cast<const BlockQ8_0*>(a));
    case GgmlType::Q5_1:
      return k.dot_q5_1_q8_1(n, reinterpret_cast<const BlockQ5_1*>(w), reinterpret_cast<const BlockQ8_1*>(a));
    case GgmlType::IQ4_NL:
      return (x8 ? k.dot_iq4_nl_q8_0_x8 : o == Order::kBatch ? k.dot_iq4_nl_q8_0_batch : k.dot_iq4_nl_q8_0)(
          n, reinterpret_cast<const BlockIQ4_NL*>(w), reinterpret_cast<const BlockQ8_0*>(a));
    case GgmlType::Q2_K:
      return k.dot_q2_k_q8_k(n, reinterpret_cast<const BlockQ2_K*>(w), reinterpret_cast<const BlockQ8_K*>(a));
    case GgmlType::Q3_K:
      return k.dot_q3_k_q8_k(n, reinterpret_cast<const BlockQ3_K*>(w), reinterpret_cast<const BlockQ8_K*>(a));
    case GgmlType::Q4_K:
      return (x8 ? k.dot_q4_k_q8_k_x8 : k.dot_q4_k_q8_k)(n, reinterpret_cast<const BlockQ4_K*>(w),
                                                          reinterpret_cast<const BlockQ8_K*>(a));
    case GgmlType::Q5_K:
      return k.dot_q5_k_q8_k(n, reinterpret_cast<const BlockQ5_K*>(w), reinterpret_cast<const BlockQ8_K*>(a));
    case GgmlType::Q6_K:
      return k.dot_q6_k_q8_k(n, reinterpret_cast<const BlockQ6_K*>(w), reinterpret_cast<const BlockQ8_K*>(a));
    case GgmlType::IQ4_XS:
      return k.dot_iq4_xs_q8_k(n, reinterpret_cast<const BlockIQ4_XS*>(w), reinterpret_cast<const BlockQ8_K*>(a));
    default: ADD_FAILURE(); return 0;
  }
}

struct TypeOrder {
  gguf::GgmlType type;
  Order order;
  const char* name() const {
    static constexpr const char* kNames[] = {"", " x8", " batch"};
    return kNames[int(order)];
  }
};
const TypeOrder kQuantOrders[] = {
    {gguf::GgmlType::Q4_0, Order::kX8},     {gguf::GgmlType::Q4_1, Order::kRow},   {gguf::GgmlType::Q5_0, Order::kRow},
    {gguf::GgmlType::Q5_1, Order::kRow},    {gguf::GgmlType::IQ4_NL, Order::kRow}, {gguf::GgmlType::IQ4_NL, Order::kX8},
    {gguf::GgmlType::IQ4_NL, Order::kBatch}, {gguf::GgmlType::Q2_K, Order::kRow},  {gguf::GgmlType::Q3_K, Order::kRow},
    {gguf::GgmlType::Q4_K, Order::kRow},    {gguf::GgmlType::Q4_K, Order::kX8},    {gguf::GgmlType::Q5_K, Order::kRow},
    {gguf::GgmlType::Q6_K, Order::kRow},    {gguf::GgmlType::IQ4_XS, Order::kRow},
};

TEST(Kernels, EveryQuantizedDotMatchesScalarAndReference) {
  // Each type against its activation format, every table bit-identical to the scalar one; the scalar one within
  // float rounding of the dequantized weights and activations multiplied in double (1e-5 of the sum of |products|:
  // the integer lanes are exact, so only the per-block float steps round).
  const Kernels& s = scalar_kernels();
  for (const TypeOrder& to : kQuantOrders) {
    const bool k256 = gguf::type_info(to.type)->block_elems == 256;
    for (int64_t n : k256 ? std::vector<int64_t>{256, 512, 2048, 256 * 11} : std::vector<int64_t>{32, 96, 256, 4096 + 32}) {
      const auto w = random_weights(to.type, n, uint64_t(n) * 31 + uint64_t(to.type));
      const Act a = quantize_for(to.type, randn(size_t(n), uint64_t(n) + 5));
      std::vector<float> wf(static_cast<size_t>(n));
      dequantize_row(to.type, w.data(), n, wf.data());
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        ref += double(wf[size_t(i)]) * a.values[size_t(i)];
        mag += std::fabs(double(wf[size_t(i)]) * a.values[size_t(i)]);
      }
      // Q4_1 / Q5_1: the offset m multiplies the block sum rounded to f16 (2^-11 relative).
      for (size_t b = 0; b < a.block_sums.size(); ++b) {
        const uint16_t m = to.type == gguf::GgmlType::Q4_1 ? reinterpret_cast<const BlockQ4_1*>(w.data())[b].m
                                                            : reinterpret_cast<const BlockQ5_1*>(w.data())[b].m;
        mag += std::fabs(double(f16_to_f32(m)) * a.block_sums[b]) * 50.0;
      }
      const float got = table_dot(s, to.type, to.order, n, w.data(), a.bytes.data());
      EXPECT_NEAR(got, ref, 1e-5 * mag + 1e-6) << gguf::type_name(to.type) << to.name() << " n=" << n;
      for (const Kernels* k : simd_tables())
        EXPECT_EQ(bits(got), bits(table_dot(*k, to.type, to.order, n, w.data(), a.bytes.data())))
            << k->name << " " << gguf::type_name(to.type) << to.name() << " n=" << n;
    }
  }
}

TEST(Kernels, TiledAttentionScoresAndValuesMatchScalar) {
  // Key and value rows of halves at a stride (the KV cache's row of all heads), key counts below, at and past a
  // multiple of 8, head sizes that are and are not multiples of 8.
  const Kernels& s = scalar_kernels();
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t dim : {int64_t(64), int64_t(128), int64_t(36)})
    for (int64_t n : {int64_t(1), int64_t(8), int64_t(13), int64_t(64)}) {
      const int64_t stride = dim * 3;
      std::vector<uint16_t> kv(size_t(n * stride));
      for (auto& h : kv) h = f32_to_f16(nd(g));
      std::vector<float> q(static_cast<size_t>(dim)), p(static_cast<size_t>(n)), acc0(static_cast<size_t>(dim));
      for (auto& x : q) x = nd(g);
      for (auto& x : p) x = std::fabs(nd(g));
      for (auto& x : acc0) x = nd(g);
      std::vector<float> want(static_cast<size_t>(n)), want_acc = acc0;
      s.tile_scores_f16(n, dim, kv.data() + 5, stride, q.data(), want.data());
      s.tile_accumulate_f16(n, dim, kv.data() + 7, stride, p.data(), want_acc.data());
      for (const Kernels* k : simd_tables()) {
        std::vector<float> got(static_cast<size_t>(n)), got_acc = acc0;
        k->tile_scores_f16(n, dim, kv.data() + 5, stride, q.data(), got.data());
        k->tile_accumulate_f16(n, dim, kv.data() + 7, stride, p.data(), got_acc.data());
        for (int64_t j = 0; j < n; ++j) EXPECT_EQ(bits(got[size_t(j)]), bits(want[size_t(j)])) << k->name << " key " << j;
        for (int64_t d = 0; d < dim; ++d)
          EXPECT_EQ(bits(got_acc[size_t(d)]), bits(want_acc[size_t(d)])) << k->name << " element " << d;
      }
    }
}

TEST(Kernels, ShiftedExponentialsEqualTheScalarOnes) {
  // exp_approx_f32(x - m) over 8-element steps, masked (-inf) and underflowing inputs included.
  std::vector<float> x = randn(256, 41);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= 30.0f;
  x[3] = -INFINITY;
  x[17] = -200.0f;
  const float m = 4.5f;
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = exp_approx_f32(x[i] - m);
  for (const Kernels* k : all_tables()) {
    std::vector<float> got(x.size());
    k->exp_shifted(int64_t(x.size()), x.data(), m, got.data());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(bits(got[i]), bits(want[i])) << k->name << " element " << i;
  }
}

TEST(Kernels, KeysScoredTogetherEqualOneByOne) {
  // One query against up to eight f16 keys at once: each key's score is its dot_f16_single, bit for bit, with and
  // without a tail past the 32-element steps.
  for (int64_t n : {int64_t(64), int64_t(128), int64_t(103), int64_t(1024)}) {
    const int64_t stride = n + 24;
    std::vector<uint16_t> keys(static_cast<size_t>(8 * stride)), q(static_cast<size_t>(n));
    const auto kv = randn(keys.size(), 31), qv = randn(q.size(), 32);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = f32_to_f16(kv[i]);
    for (size_t i = 0; i < q.size(); ++i) q[i] = f32_to_f16(qv[i]);
    for (const Kernels* k : all_tables())
      for (int nk = 1; nk <= 8; ++nk) {
        float out[8];
        k->dot_f16_single_keys(nk, n, keys.data(), stride, q.data(), out);
        for (int j = 0; j < nk; ++j)
          EXPECT_EQ(bits(out[j]), bits(k->dot_f16_single(n, keys.data() + j * stride, q.data())))
              << k->name << " n=" << n << " keys " << nk << " key " << j;
      }
  }
}

TEST(Kernels, EightRowInterleavedQ4_0DotsEqualSingleOnes) {
  // Every (row, activation row) of the eight-row kernel equals the single-row interleaved dot, for 1 to 8
  // activation rows, block counts odd and even.
  const Kernels& s = scalar_kernels();
  for (int64_t n : {int64_t(32), int64_t(96), int64_t(1024), int64_t(32 * 67)}) {
    std::vector<std::vector<uint8_t>> rows;
    const BlockQ4_0* w8[8];
    for (int i = 0; i < 8; ++i) {
      rows.push_back(random_weights(gguf::GgmlType::Q4_0, n, uint64_t(20 + i)));
      w8[i] = reinterpret_cast<const BlockQ4_0*>(rows.back().data());
    }
    std::vector<Act> acts;
    const BlockQ8_0* a8[8];
    for (int t = 0; t < 8; ++t) {
      acts.push_back(quantize_for(gguf::GgmlType::Q4_0, randn(size_t(n), uint64_t(200 + t))));
      a8[t] = reinterpret_cast<const BlockQ8_0*>(acts.back().bytes.data());
    }
    for (const Kernels* k : all_tables())
      for (int nt = 1; nt <= 8; ++nt) {
        float out[64];
        k->dot8_q4_0_q8_0_x8(n, w8, a8, nt, out);
        for (int t = 0; t < nt; ++t)
          for (int i = 0; i < 8; ++i)
            EXPECT_EQ(bits(out[t * 8 + i]), bits(s.dot_q4_0_q8_0_x8(n, w8[i], a8[t])))
                << k->name << " n=" << n << " nt=" << nt << " row " << i << " act " << t;
      }
  }
}

TEST(Kernels, KQuantRowsAgainstSeveralActivationsEqualOneByOne) {
  // One Q2_K, Q3_K, Q5_K or IQ4_XS row against 1 to 8 activation rows: each result is the one-row product's, bit for
  // bit, in every table, and the tables agree with the scalar one.
  using gguf::GgmlType;
  const Kernels& s = scalar_kernels();
  // The table's one-row product and its several-row one, by type.
  auto one = [](const Kernels& k, GgmlType t, int64_t n, const uint8_t* w, const BlockQ8_K* a) {
    if (t == GgmlType::Q2_K) return k.dot_q2_k_q8_k(n, reinterpret_cast<const BlockQ2_K*>(w), a);
    if (t == GgmlType::Q3_K) return k.dot_q3_k_q8_k(n, reinterpret_cast<const BlockQ3_K*>(w), a);
    if (t == GgmlType::IQ4_XS) return k.dot_iq4_xs_q8_k(n, reinterpret_cast<const BlockIQ4_XS*>(w), a);
    return k.dot_q5_k_q8_k(n, reinterpret_cast<const BlockQ5_K*>(w), a);
  };
  auto several = [](const Kernels& k, GgmlType t, int64_t n, const uint8_t* w, const BlockQ8_K* const a[], int nt,
                    float* out) {
    if (t == GgmlType::Q2_K) return k.dotn_q2_k_q8_k(n, reinterpret_cast<const BlockQ2_K*>(w), a, nt, out);
    if (t == GgmlType::Q3_K) return k.dotn_q3_k_q8_k(n, reinterpret_cast<const BlockQ3_K*>(w), a, nt, out);
    if (t == GgmlType::IQ4_XS) return k.dotn_iq4_xs_q8_k(n, reinterpret_cast<const BlockIQ4_XS*>(w), a, nt, out);
    return k.dotn_q5_k_q8_k(n, reinterpret_cast<const BlockQ5_K*>(w), a, nt, out);
  };
  for (GgmlType type : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K, GgmlType::IQ4_XS})
    for (int64_t n : {int64_t(256), int64_t(256 * 7)}) {
      const auto wk = random_weights(type, n, 11);
      std::vector<Act> ak;
      const BlockQ8_K* pk[8];
      for (int t = 0; t < 8; ++t) {
        ak.push_back(quantize_for(type, randn(size_t(n), uint64_t(600 + t))));
        pk[t] = reinterpret_cast<const BlockQ8_K*>(ak.back().bytes.data());
      }
      for (const Kernels* k : all_tables())
        for (int nt = 1; nt <= 8; ++nt) {
          float out[8];
          several(*k, type, n, wk.data(), pk, nt, out);
          for (int t = 0; t < nt; ++t) {
            EXPECT_EQ(bits(out[t]), bits(one(*k, type, n, wk.data(), pk[t])))
                << k->name << " " << gguf::type_name(type) << " n=" << n << " nt=" << nt;
            EXPECT_EQ(bits(out[t]), bits(one(s, type, n, wk.data(), pk[t])))
                << k->name << " " << gguf::type_name(type) << " n=" << n;
          }
        }
    }
}

TEST(Kernels, EightRowQ4_KDotsEqualTheOneRowOrders) {
  // Eight Q4_K rows against 1 to kQ4KTileTokens activation rows: each (row, activation row) equals the scalar
  // table's batched order below n_grouped and its one-row order after, bit for bit, in every table.
  const Kernels& s = scalar_kernels();
  for (int64_t n : {int64_t(256), int64_t(256 * 7)}) {
    std::vector<std::vector<uint8_t>> rows;
    const BlockQ4_K* w8[8];
    for (int i = 0; i < 8; ++i) {
      rows.push_back(random_weights(gguf::GgmlType::Q4_K, n, uint64_t(40 + i)));
      w8[i] = reinterpret_cast<const BlockQ4_K*>(rows.back().data());
    }
    std::vector<Act> acts;
    std::vector<const BlockQ8_K*> an;
    for (int t = 0; t < kQ4KTileTokens; ++t) {
      acts.push_back(quantize_for(gguf::GgmlType::Q4_K, randn(size_t(n), uint64_t(500 + t))));
      an.push_back(reinterpret_cast<const BlockQ8_K*>(acts.back().bytes.data()));
    }
    for (const Kernels* k : all_tables())
      for (int nt : {1, 2, 5, 8, 13, kQ4KTileTokens})
        for (int grouped : {0, 4, 8, 60}) {
          if (grouped > nt) continue;
          std::vector<float> out(size_t(8 * nt));
          k->dot8_q4_k_q8_k_x8(n, w8, an.data(), nt, grouped, out.data());
          for (int t = 0; t < nt; ++t)
            for (int i = 0; i < 8; ++i) {
              float want;
              if (t < grouped) {
                const BlockQ8_K* a4[4] = {an[size_t(t)], an[size_t(t)], an[size_t(t)], an[size_t(t)]};
                float o[4];
                s.dot4_q4_k_q8_k_x8(n, w8[i], a4, o);
                want = o[0];
              } else {
                want = s.dot_q4_k_q8_k_x8(n, w8[i], an[size_t(t)]);
              }
              ASSERT_EQ(bits(out[size_t(t * 8 + i)]), bits(want))
                  << k->name << " n=" << n << " nt=" << nt << " grouped=" << grouped << " row " << i << " act " << t;
            }
        }
  }
}

TEST(Kernels, Q6_KRowAgainstSeveralActivationsEqualsOneByOne) {
  // One Q6_K row against 1 to 8 activation rows: each result is dot_q6_k_q8_k's, bit for bit, in every table, and
  // the tables agree with the scalar one.
  for (int64_t n : {int64_t(256), int64_t(256 * 7)}) {
    const auto wk = random_weights(gguf::GgmlType::Q6_K, n, 10);
    std::vector<Act> ak;
    const BlockQ8_K* pk[8];
    for (int t = 0; t < 8; ++t) {
      ak.push_back(quantize_for(gguf::GgmlType::Q6_K, randn(size_t(n), uint64_t(400 + t))));
      pk[t] = reinterpret_cast<const BlockQ8_K*>(ak.back().bytes.data());
    }
    const auto* w = reinterpret_cast<const BlockQ6_K*>(wk.data());
    for (const Kernels* k : all_tables())
      for (int nt = 1; nt <= 8; ++nt) {
        float out[8];
        k->dotn_q6_k_q8_k(n, w, pk, nt, out);
        for (int t = 0; t < nt; ++t) {
          EXPECT_EQ(bits(out[t]), bits(k->dot_q6_k_q8_k(n, w, pk[t]))) << k->name << " n=" << n << " nt=" << nt;
          EXPECT_EQ(bits(out[t]), bits(scalar_kernels().dot_q6_k_q8_k(n, w, pk[t]))) << k->name << " n=" << n;
        }
      }
  }
}

TEST(Kernels, FourRowQ4_KDotsMatchScalar) {
  // Q4_K's four-row kernel has its own (batched) order, so its tables are checked against the scalar one and the
  // single order within rounding.
  const Kernels& s = scalar_kernels();
  for (int64_t n : {int64_t(256), int64_t(1024), int64_t(256 * 7)}) {
    const auto wk = random_weights(gguf::GgmlType::Q4_K, n, 8);
    std::vector<Act> ak;
    for (int t = 0; t < 4; ++t) ak.push_back(quantize_for(gguf::GgmlType::Q4_K, randn(size_t(n), uint64_t(100 + t))));
    const BlockQ8_K* pk[4];
    for (int t = 0; t < 4; ++t) pk[t] = reinterpret_cast<const BlockQ8_K*>(ak[size_t(t)].bytes.data());
    float want[4];
    s.dot4_q4_k_q8_k_x8(n, reinterpret_cast<const BlockQ4_K*>(wk.data()), pk, want);
    for (const Kernels* k : all_tables()) {
      float ok[4];
      k->dot4_q4_k_q8_k_x8(n, reinterpret_cast<const BlockQ4_K*>(wk.data()), pk, ok);
      for (int t = 0; t < 4; ++t) {
        EXPECT_EQ(bits(ok[t]), bits(want[t])) << k->name << " n=" << n;
        const float one = s.dot_q4_k_q8_k_x8(n, reinterpret_cast<const BlockQ4_K*>(wk.data()), pk[t]);
        EXPECT_NEAR(ok[t], one, 1e-5 * (1 + std::fabs(one))) << "n=" << n;
      }
    }
  }
}

TEST(Kernels, SingleRowFloatDotsMatchScalarAndReference) {
  const Kernels& s = scalar_kernels();
  for (int64_t n : {int64_t(1), int64_t(16), int64_t(32), int64_t(64), int64_t(100), int64_t(4096)}) {
    auto w = randn(size_t(n), uint64_t(n) + 40), a = randn(size_t(n), uint64_t(n) + 41);
    std::vector<uint16_t> wh(static_cast<size_t>(n)), ah(wh.size());
    s.to_f16(w.data(), wh.data(), n);
    s.to_f16(a.data(), ah.data(), n);
    double r32 = 0, r16 = 0;
    for (int64_t i = 0; i < n; ++i) {
      r32 += double(w[size_t(i)]) * a[size_t(i)];
      r16 += double(f16_to_f32(wh[size_t(i)])) * f16_to_f32(ah[size_t(i)]);
    }
    std::vector<uint16_t> wb(wh.size()), ab(wh.size());
    s.to_bf16(w.data(), wb.data(), n);
    s.to_bf16(a.data(), ab.data(), n);
    double rb = 0;
    for (int64_t i = 0; i < n; ++i) rb += double(bf16_to_f32(wb[size_t(i)])) * bf16_to_f32(ab[size_t(i)]);
    const float s32 = s.dot_f32_single(n, w.data(), a.data()), s16 = s.dot_f16_single(n, wh.data(), ah.data());
    const float sb = s.dot_bf16_single(n, wb.data(), ab.data());
    EXPECT_NEAR(s32, r32, 1e-4 * std::sqrt(double(n)));
    EXPECT_NEAR(s16, r16, 1e-4 * std::sqrt(double(n)));
    EXPECT_NEAR(sb, rb, 1e-4 * std::sqrt(double(n)));
    for (const Kernels* k : simd_tables()) {
      EXPECT_EQ(bits(s32), bits(k->dot_f32_single(n, w.data(), a.data()))) << k->name << " n=" << n;
      EXPECT_EQ(bits(s16), bits(k->dot_f16_single(n, wh.data(), ah.data()))) << k->name << " n=" << n;
      EXPECT_EQ(bits(sb), bits(k->dot_bf16_single(n, wb.data(), ab.data()))) << k->name << " n=" << n;
    }
  }
}

TEST(Kernels, SwigluMatchesScalarAndSilu) {
  const Kernels& s = scalar_kernels();
  for (int64_t n : {int64_t(5), int64_t(64), int64_t(1027)}) {
    auto g = randn(size_t(n), uint64_t(n) + 50, 4.0f), u = randn(size_t(n), uint64_t(n) + 51);
    g[0] = 120.0f;  // the exponential's far ends: exp(-120) underflows to 0 ...
    if (n > 1) g[1] = -120.0f;  // ... and exp(120) overflows: silu -> 0 * up
    std::vector<float> want(static_cast<size_t>(n)), got(want.size());
    s.swiglu(n, g.data(), u.data(), want.data());
    for (int64_t i = 0; i < n; ++i) {
      const double silu = double(g[size_t(i)]) / (1.0 + std::exp(-double(g[size_t(i)])));
      EXPECT_NEAR(want[size_t(i)], silu * u[size_t(i)], 1e-6 * (1 + std::fabs(silu * u[size_t(i)]))) << i;
    }
    for (const Kernels* k : simd_tables()) {
      k->swiglu(n, g.data(), u.data(), got.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(got[size_t(i)]), bits(want[size_t(i)])) << k->name << " " << i;
    }
  }
}

TEST(Kernels, SiluIsSwigluWithoutItsUpFactor) {
  const Kernels& s = scalar_kernels();
  for (int64_t n : {int64_t(5), int64_t(128), int64_t(1029)}) {
    auto x = randn(size_t(n), uint64_t(n) + 60, 4.0f);
    x[0] = 120.0f;
    if (n > 1) x[1] = -120.0f;
    const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
    std::vector<float> want(static_cast<size_t>(n)), got(want.size());
    s.swiglu(n, x.data(), ones.data(), want.data());
    s.silu(n, x.data(), got.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(got[size_t(i)]), bits(want[size_t(i)])) << "scalar " << i;
    for (const Kernels* k : simd_tables()) {
      k->silu(n, x.data(), got.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(got[size_t(i)]), bits(want[size_t(i)])) << k->name << " " << i;
    }
  }
}

TEST(Kernels, FloatMadIsOneFusedMultiplyAddPerElement) {
  for (int64_t n : {int64_t(3), int64_t(128), int64_t(133)}) {
    const auto x = randn(size_t(n), 70), y = randn(size_t(n), 71);
    std::vector<float> want = y;
    for (int64_t i = 0; i < n; ++i) want[size_t(i)] = std::fma(x[size_t(i)], -0.731f, y[size_t(i)]);
    std::vector<const Kernels*> all = simd_tables();
    all.push_back(&scalar_kernels());
    for (const Kernels* k : all) {
      auto got = y;
      k->mad_f32(n, got.data(), x.data(), -0.731f);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(got[size_t(i)]), bits(want[size_t(i)])) << k->name << " " << i;
    }
  }
}

TEST(Kernels, MergeStepIsOneFusedMultiplyAddOfARoundedProduct) {
  for (int64_t n : {int64_t(5), int64_t(128), int64_t(133)}) {
    const auto x = randn(size_t(n), 72), y = randn(size_t(n), 73);
    std::vector<float> want = y;
    for (int64_t i = 0; i < n; ++i) want[size_t(i)] = std::fma(y[size_t(i)], 0.613f, x[size_t(i)] * 1.377f);
    std::vector<const Kernels*> all = simd_tables();
    all.push_back(&scalar_kernels());
    for (const Kernels* k : all) {
      auto got = y;
      k->merge_f32(n, got.data(), 0.613f, x.data(), 1.377f);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(got[size_t(i)]), bits(want[size_t(i)])) << k->name << " " << i;
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

TEST(Ops, MatmulFollowsLlamaCppOrdersForEveryType) {
  // A product row by row equals the kernel of its type (the interleaved order where the row count is a multiple of
  // 8); a batch equals it too, except Q4_K's interleaved matrices, whose groups of four activation rows take the
  // batched order, and IQ4_NL's others, which take its batch order; threads change nothing.
  ThreadPool pool(3);
  for (const TypeOrder& to : kQuantOrders) {
    if (to.order == Order::kBatch) continue;  // IQ4_NL's kRow entry covers it
    const bool x8 = to.order == Order::kX8;
    const Order batch_order = to.type == gguf::GgmlType::IQ4_NL && !x8 ? Order::kBatch : to.order;
    int orders_differ = 0;
    const int64_t cols = 512, rows = x8 ? 16 : 12;
    const uint64_t row_bytes = gguf::row_bytes(to.type, uint64_t(cols));
    const auto data = random_weights(to.type, cols * rows, 77 + uint64_t(to.type));
    model::Mat w{to.type, data.data(), cols, rows, row_bytes};
    const int64_t n_tok = 6;
    const auto x = randn(size_t(n_tok * cols), 78);
    std::vector<float> batched(size_t(n_tok * rows)), per_row(batched.size()), threaded(batched.size());
    Context c1;
    Context c3;
    c3.pool = &pool;
    matmul(c1, w, x.data(), n_tok, batched.data());
    const MatmulJob job{&w, x.data(), n_tok, per_row.data(), true};
    matmul_many(c1, std::span<const MatmulJob>(&job, 1));
    matmul(c3, w, x.data(), n_tok, threaded.data());
    EXPECT_EQ(threaded, batched) << gguf::type_name(to.type);
    for (int64_t t = 0; t < n_tok; ++t) {
      const Act a = quantize_for(to.type, std::vector<float>(x.begin() + t * cols, x.begin() + (t + 1) * cols));
      for (int64_t r = 0; r < rows; ++r) {
        const float want = table_dot(scalar_kernels(), to.type, to.order, cols, w.row(r), a.bytes.data());
        ASSERT_EQ(bits(per_row[size_t(t * rows + r)]), bits(want)) << gguf::type_name(to.type) << " t=" << t;
        const float want_batch = table_dot(scalar_kernels(), to.type, batch_order, cols, w.row(r), a.bytes.data());
        orders_differ += bits(want_batch) != bits(want);
        const bool grouped = to.type == gguf::GgmlType::Q4_K && x8 && t < 4;
        if (!grouped) {
          ASSERT_EQ(bits(batched[size_t(t * rows + r)]), bits(want_batch)) << gguf::type_name(to.type) << " t=" << t;
        }
      }
    }
    // IQ4_NL's two orders round differently somewhere in 72 products, so the batch's order is seen.
    if (batch_order != to.order) {
      EXPECT_GT(orders_differ, 0);
    }
    if (to.type == gguf::GgmlType::Q4_K && x8) {
      std::vector<Act> a;
      const BlockQ8_K* a4[4];
      for (int t = 0; t < 4; ++t) {
        a.push_back(quantize_for(to.type, std::vector<float>(x.begin() + t * cols, x.begin() + (t + 1) * cols)));
        a4[t] = reinterpret_cast<const BlockQ8_K*>(a.back().bytes.data());
      }
      for (int64_t r = 0; r < rows; ++r) {
        float out[4];
        scalar_kernels().dot4_q4_k_q8_k_x8(cols, reinterpret_cast<const BlockQ4_K*>(w.row(r)), a4, out);
        for (int t = 0; t < 4; ++t) EXPECT_EQ(bits(batched[size_t(t * rows + r)]), bits(out[t])) << "t=" << t;
      }
    }
  }
}

TEST(Ops, FloatMatmulTakesTheSingleRowOrderForOneRow) {
  const int64_t cols = 100 * 8, rows = 8;
  const auto wv = randn(size_t(cols * rows), 90), x = randn(size_t(2 * cols), 91);
  model::Mat w{gguf::GgmlType::F32, reinterpret_cast<const uint8_t*>(wv.data()), cols, rows, uint64_t(cols) * 4};
  std::vector<float> one(static_cast<size_t>(rows)), two(static_cast<size_t>(2 * rows));
  Context c;
  matmul(c, w, x.data(), 1, one.data());
  matmul(c, w, x.data(), 2, two.data());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(bits(one[size_t(r)]), bits(scalar_kernels().dot_f32_single(cols, w.f32() + r * cols, x.data())));
    EXPECT_EQ(bits(two[size_t(r)]), bits(scalar_kernels().dot_f32(cols, w.f32() + r * cols, x.data())));
  }
}

TEST(Ops, SoftmaxSumsToOneAndKeepsOrder) {
  for (int64_t n : {int64_t(3), int64_t(8), int64_t(16), int64_t(27), int64_t(128)}) {
    auto x = randn(size_t(n), uint64_t(n) + 60, 3.0f);
    auto p = x;
    softmax(p.data(), n);
    double sum = 0;
    const float mx = *std::max_element(x.begin(), x.end());
    for (int64_t i = 0; i < n; ++i) {
      sum += p[size_t(i)];
      EXPECT_NEAR(p[size_t(i)] / p[size_t(std::max_element(x.begin(), x.end()) - x.begin())],
                  std::exp(double(x[size_t(i)]) - mx), 1e-6);
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << n;
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
