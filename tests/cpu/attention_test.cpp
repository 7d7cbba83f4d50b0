// Attention's three orders (ops.h): one query row at a time, the tiled kernel from kTiledRows queries, and one query
// over 512 cells or more split into one chunk per thread. Each is close to exact attention; which one a batch takes
// decides its last bits.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "diskformer/backend/cpu/numeric.h"
#include "diskformer/backend/cpu/ops.h"
#include "diskformer/backend/cpu/thread_pool.h"
#include "support/random.h"

namespace df::cpu {
namespace {

using test::randn;

struct Cache {
  int H = 4, Hkv = 2, D = 32;
  int64_t n_pos = 0;
  std::vector<uint16_t> k, v;
  explicit Cache(int64_t n) : n_pos(n) {
    const auto k32 = randn(size_t(n * Hkv * D), 2, 2.0f), v32 = randn(size_t(n * Hkv * D), 3);
    k.resize(k32.size());
    v.resize(v32.size());
    for (size_t i = 0; i < k.size(); ++i) k[i] = f32_to_f16(k32[i]), v[i] = f32_to_f16(v32[i]);
  }
  AttentionArgs args(const std::vector<float>& q, std::vector<float>& out, int64_t pos0, int64_t n_tok) const {
    return {.q = q.data(), .k = k.data(), .v = v.data(), .out = out.data(), .n_head = H, .n_head_kv = Hkv,
            .head_dim_k = D, .head_dim_v = D, .pos0 = pos0, .n_tok = n_tok, .scale = 1.0f / std::sqrt(float(D))};
  }
  // Exact attention of query t (at position pos0 + t) in double.
  std::vector<double> exact(const std::vector<float>& q, int64_t pos0, int64_t t) const {
    std::vector<double> out(size_t(H * D), 0.0);
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / Hkv);
      std::vector<double> s;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= pos0 + t; ++j) {
        double d = 0;
        for (int i = 0; i < D; ++i) d += double(q[size_t((t * H + h) * D + i)]) * f16_to_f32(k[size_t((j * Hkv + g) * D + i)]);
        s.push_back(d / std::sqrt(double(D)));
        mx = std::max(mx, s.back());
      }
      for (int64_t j = 0; j <= pos0 + t; ++j) {
        const double p = std::exp(s[size_t(j)] - mx);
        sum += p;
        for (int i = 0; i < D; ++i) out[size_t(h * D + i)] += p * f16_to_f32(v[size_t((j * Hkv + g) * D + i)]);
      }
      for (int i = 0; i < D; ++i) out[size_t(h * D + i)] /= sum;
    }
    return out;
  }
};

double max_err(const std::vector<float>& got, size_t off, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < want.size(); ++i) e = std::max(e, std::abs(double(got[off + i]) - want[i]));
  return e;
}

TEST(Attention, TiledFromSixtyFourQueriesIsNearExactAndRoundsOtherwise) {
  const Cache c(200);
  Context ctx;
  // Positions 100 .. 199 as one batch of 100 queries (tiled) and as two of 50 (one row at a time).
  const int64_t n = 100, pos0 = 100;
  const auto q = randn(size_t(n * c.H * c.D), 4);
  std::vector<float> tiled(q.size()), rows(q.size());
  attention(ctx, c.args(q, tiled, pos0, n));
  for (int64_t b = 0; b < n; b += 50) {
    std::vector<float> qb(q.begin() + b * c.H * c.D, q.begin() + (b + 50) * c.H * c.D), ob(qb.size());
    attention(ctx, c.args(qb, ob, pos0 + b, 50));
    std::copy(ob.begin(), ob.end(), rows.begin() + b * c.H * c.D);
  }
  EXPECT_NE(tiled, rows);
  for (int64_t t : {int64_t(0), int64_t(63), int64_t(99)}) {
    const auto want = c.exact(q, pos0, t);
    EXPECT_LT(max_err(tiled, size_t(t * c.H * c.D), want), 1e-5) << t;  // f32 throughout
    EXPECT_LT(max_err(rows, size_t(t * c.H * c.D), want), 1e-2) << t;   // an f16 accumulator
  }
  // A query's tiled result does not depend on the rest of its batch.
  std::vector<float> q64(q.begin(), q.begin() + 64 * c.H * c.D), o64(q64.size());
  attention(ctx, c.args(q64, o64, pos0, 64));
  EXPECT_TRUE(std::equal(o64.begin(), o64.end(), tiled.begin()));
}

TEST(Attention, OneQueryOver512CellsSplitsByThreads) {
  const Cache c(700);
  const auto q = randn(size_t(c.H * c.D), 5);
  ThreadPool one(1), two(2), three(3);
  std::vector<float> o1(q.size()), o2(q.size()), o3(q.size());
  for (auto [pool, out] : {std::pair{&one, &o1}, std::pair{&two, &o2}, std::pair{&three, &o3}}) {
    Context ctx{.pool = pool};
    attention(ctx, c.args(q, *out, 699, 1));  // a view of 768 cells: chunks of 768, 384 and 256
  }
  EXPECT_NE(o1, o2);
  EXPECT_NE(o2, o3);
  const auto want = c.exact(q, 699, 0);
  for (const auto* o : {&o1, &o2, &o3}) EXPECT_LT(max_err(*o, 0, want), 1e-2);  // f16 accumulators
  // Below 512 cells the thread count changes nothing.
  std::vector<float> a(q.size()), b(q.size());
  Context c1{.pool = &one}, c2{.pool = &two};
  attention(c1, c.args(q, a, 255, 1));
  attention(c2, c.args(q, b, 255, 1));
  EXPECT_EQ(a, b);
  EXPECT_EQ(kv_view_cells(1), 256);
  EXPECT_EQ(kv_view_cells(256), 256);
  EXPECT_EQ(kv_view_cells(257), 512);
}

}  // namespace
}  // namespace df::cpu
