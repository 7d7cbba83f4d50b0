// The one MoE schedule: groups that fit the compute tier (halves with overlap), the CPU's share of decode's misses
// from the measured rates, and the next layer's reads ahead per tier.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "diskformer/model/moe_schedule.h"

namespace df::model {
namespace {

TEST(MoeSchedule, DistinctExpertsInFirstUseOrderAndOneGroupWhenTheyFit) {
  const std::vector<int32_t> ids = {5, 2, 9, 2, 7, 5};  // 3 tokens x top-2
  MoeSchedule s;
  schedule_moe({.ids = ids, .n_tok = 3, .n_used = 2, .n_expert = 16, .max_group = 8, .overlap = true}, s);
  EXPECT_EQ(s.distinct, (std::vector<int32_t>{5, 2, 9, 7}));
  EXPECT_EQ(s.gpu, s.distinct);
  ASSERT_EQ(s.groups.size(), 1u);
  EXPECT_EQ(s.groups[0], (std::pair<int32_t, int32_t>{0, 4}));
  EXPECT_EQ(s.where[9], 2);
  EXPECT_EQ(s.where[0], -1);
  EXPECT_TRUE(s.cpu.empty());
  EXPECT_EQ(s.missed, 4);  // nothing resident
}

TEST(MoeSchedule, GroupsOfHalfTheTierWithOverlapOfAllOfItWithout) {
  std::vector<int32_t> ids;
  for (int32_t e = 0; e < 40; ++e) ids.push_back(e);  // 10 tokens x top-4, 40 distinct
  MoeSchedule s;
  schedule_moe({.ids = ids, .n_tok = 10, .n_used = 4, .n_expert = 64, .max_group = 16, .overlap = true}, s);
  ASSERT_EQ(s.groups.size(), 5u);
  for (const auto& [a, b] : s.groups) EXPECT_LE(b - a, 8);
  schedule_moe({.ids = ids, .n_tok = 10, .n_used = 4, .n_expert = 64, .max_group = 16, .overlap = false}, s);
  ASSERT_EQ(s.groups.size(), 3u);
  EXPECT_EQ(s.groups[2], (std::pair<int32_t, int32_t>{32, 40}));
  // Never fewer than one token's experts in a group.
  schedule_moe({.ids = ids, .n_tok = 10, .n_used = 4, .n_expert = 64, .max_group = 5, .overlap = true}, s);
  for (const auto& [a, b] : s.groups) EXPECT_TRUE(b - a == 4 || b == 40);
}

TEST(MoeSchedule, CpuShareBalancesItsTimeAgainstTheCopies) {
  // Equal rates: half of the misses each way (ties: fewer on the CPU).
  EXPECT_EQ(cpu_share_count(std::vector<double>(8, 1.0), 1.0), 4);
  EXPECT_EQ(cpu_share_count(std::vector<double>(7, 1.0), 1.0), 3);
  // A CPU three times slower takes a quarter.
  EXPECT_EQ(cpu_share_count(std::vector<double>(8, 3.0), 1.0), 2);
  EXPECT_EQ(cpu_share_count(std::vector<double>{}, 1.0), 0);
  // Dearer experts at the end of the list: the CPU stops before them.
  EXPECT_EQ(cpu_share_count(std::vector<double>{1, 1, 4, 4}, 1.0), 2);

  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  MoeSchedule s;
  // Experts 1 and 2 are on the GPU; of the 6 misses the CPU takes the last 3 in routing order.
  schedule_moe({.ids = ids, .n_tok = 1, .n_used = 8, .n_expert = 16, .max_group = 16, .cpu_share = true,
                .resident = [](int32_t e) { return e <= 2; }, .record_bytes = 1000,
                .copy_s_per_byte = 1e-9, .cpu_s_per_byte = 1e-9},
               s);
  EXPECT_EQ(s.missed, 6);
  EXPECT_EQ(s.cpu, (std::vector<int32_t>{6, 7, 8}));
  EXPECT_EQ(s.gpu, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(s.where[6], -1);
  EXPECT_EQ(s.where[5], 4);
  // Only experts RAM holds: 8 is on disk, so the CPU takes 5, 6 and 7.
  schedule_moe({.ids = ids, .n_tok = 1, .n_used = 8, .n_expert = 16, .max_group = 16, .cpu_share = true,
                .resident = [](int32_t e) { return e <= 2; }, .in_ram = [](int32_t e) { return e != 8; },
                .record_bytes = 1000, .copy_s_per_byte = 1e-9, .cpu_s_per_byte = 1e-9},
               s);
  EXPECT_EQ(s.cpu, (std::vector<int32_t>{5, 6, 7}));
  // A CPU measured far too slow takes nothing, unless the executor asks for one to measure it again (never the last
  // miss: the GPU keeps at least one of them).
  schedule_moe({.ids = ids, .n_tok = 1, .n_used = 8, .n_expert = 16, .max_group = 16, .cpu_share = true,
                .resident = [](int32_t e) { return e <= 2; }, .record_bytes = 1000, .copy_s_per_byte = 1e-9,
                .cpu_s_per_byte = 1e-6},
               s);
  EXPECT_TRUE(s.cpu.empty());
  schedule_moe({.ids = ids, .n_tok = 1, .n_used = 8, .n_expert = 16, .max_group = 16, .cpu_share = true,
                .resident = [](int32_t e) { return e <= 2; }, .record_bytes = 1000, .copy_s_per_byte = 1e-9,
                .cpu_s_per_byte = 1e-6, .min_cpu = 1},
               s);
  EXPECT_EQ(s.cpu, (std::vector<int32_t>{8}));
  // No share without cpu_share.
  schedule_moe({.ids = ids, .n_tok = 2, .n_used = 4, .n_expert = 16, .max_group = 16}, s);
  EXPECT_TRUE(s.cpu.empty());
}

TEST(MoeSchedule, SeveralTokensShareTheExpertsFewestOfThemUse) {
  // Two tokens: experts 1, 2 and 3 serve both, 4 and 5 one each. The CPU's time grows with an expert's rows, its
  // copy's does not: at equal per-byte rates the CPU takes the two single-row experts (listed in routing order),
  // where the last two in routing order would be 3 and 5.
  const std::vector<int32_t> ids = {4, 1, 2, 3, 5, 1, 2, 3};
  MoeSchedule s;
  schedule_moe({.ids = ids, .n_tok = 2, .n_used = 4, .n_expert = 8, .max_group = 8, .cpu_share = true,
                .record_bytes = 1000, .copy_s_per_byte = 1e-9, .cpu_s_per_byte = 1e-9},
               s);
  EXPECT_EQ(s.missed, 5);
  EXPECT_EQ(s.cpu, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(s.gpu, (std::vector<int32_t>{1, 2, 3}));
  // A CPU four times quicker per byte takes the shared ones too, cheapest first, but leaves one to the copies.
  schedule_moe({.ids = ids, .n_tok = 2, .n_used = 4, .n_expert = 8, .max_group = 8, .cpu_share = true,
                .record_bytes = 1000, .copy_s_per_byte = 1e-9, .cpu_s_per_byte = 0.25e-9},
               s);
  EXPECT_EQ(s.cpu, (std::vector<int32_t>{4, 2, 3, 5}));
  EXPECT_EQ(s.gpu, (std::vector<int32_t>{1}));
}

TEST(MoeSchedule, ReadsAheadGoToTheTierThatLacksThem) {
  const std::vector<int32_t> ids = {0, 1};
  const std::vector<int32_t> guess = {3, 4, 5, 6};
  MoeSchedule s;
  // Next layer: 3 on the GPU already, 4 and 5 in RAM, 6 only on disk.
  schedule_moe({.ids = ids, .n_tok = 1, .n_used = 2, .n_expert = 8, .max_group = 4, .guess = guess,
                .next_resident = [](int32_t e) { return e == 3; },
                .next_in_ram = [](int32_t e) { return e == 4 || e == 5; }},
               s);
  EXPECT_EQ(s.prefetch_compute, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(s.prefetch_ram, (std::vector<int32_t>{6}));
  // The CPU backend's compute tier is RAM: everything missing there is read ahead into it.
  schedule_moe({.ids = ids, .n_tok = 1, .n_used = 2, .n_expert = 8, .max_group = 4, .guess = guess,
                .next_resident = [](int32_t e) { return e == 3; }},
               s);
  EXPECT_EQ(s.prefetch_compute, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_TRUE(s.prefetch_ram.empty());
}

TEST(MoeSchedule, ReadsAheadIntoTheComputeTierAreTheLikeliestThatFit) {
  const std::vector<int32_t> ids = {0, 1};
  const std::vector<int32_t> guess = {6, 3, 4, 5};  // likeliest first
  MoeSchedule s;
  // 3 resident already takes none of the allowance; 4 and 5 in RAM, 6 too.
  schedule_moe({.ids = ids, .n_tok = 1, .n_used = 2, .n_expert = 8, .max_group = 4, .guess = guess,
                .max_prefetch_compute = 2, .next_resident = [](int32_t e) { return e == 3; },
                .next_in_ram = [](int32_t e) { return e != 7; }},
               s);
  EXPECT_EQ(s.prefetch_compute, (std::vector<int32_t>{6, 4}));
  EXPECT_TRUE(s.prefetch_ram.empty());
  // No idle time on the link: nothing read ahead into it; RAM still reads ahead what it lacks.
  schedule_moe({.ids = ids, .n_tok = 1, .n_used = 2, .n_expert = 8, .max_group = 4, .guess = guess,
                .max_prefetch_compute = 0, .next_resident = [](int32_t e) { return e == 3; },
                .next_in_ram = [](int32_t e) { return e != 6; }},
               s);
  EXPECT_TRUE(s.prefetch_compute.empty());
  EXPECT_EQ(s.prefetch_ram, (std::vector<int32_t>{6}));
}

TEST(CpuRate, ColdSamplesNeverRaiseTheEstimateAndWarmOutliersAreCapped) {
  CpuRate r;
  // Cold and slower than the stand-in: the stand-in stays.
  r.add(1e-3, 1'000'000, /*warm=*/false);
  EXPECT_EQ(r.s_per_byte(), 0);
  // Cold and faster than the stand-in: taken.
  r.add(1e-5, 1'000'000, /*warm=*/false);
  EXPECT_DOUBLE_EQ(r.s_per_byte(), 1e-11);
  // Cold and slower than the estimate: ignored; faster: taken.
  r.add(1e-4, 1'000'000, /*warm=*/false);
  EXPECT_DOUBLE_EQ(r.s_per_byte(), 1e-11);
  r.add(5e-6, 1'000'000, /*warm=*/false);
  EXPECT_DOUBLE_EQ(r.s_per_byte(), 5e-12);
  // Warm samples move it either way, a quarter of the way at a time.
  r.add(9e-6, 1'000'000, /*warm=*/true);
  EXPECT_DOUBLE_EQ(r.s_per_byte(), 0.75 * 5e-12 + 0.25 * 9e-12);
  // A slow warm sample counts as twice the estimate at most: an outlier moves it by a quarter of that.
  const double before = r.s_per_byte();
  r.add(1.0, 1'000'000, /*warm=*/true);
  EXPECT_DOUBLE_EQ(r.s_per_byte(), 0.75 * before + 0.25 * 2 * before);
  CpuRate w;
  w.add(1e-6, 1'000'000, /*warm=*/true);  // the first warm sample is taken whole up to twice the stand-in
  EXPECT_DOUBLE_EQ(w.s_per_byte(), 1e-12);
  CpuRate slow;
  slow.add(1e-3, 1'000'000, /*warm=*/true);
  EXPECT_DOUBLE_EQ(slow.s_per_byte(), 2 * kCpuGuessSPerByte);
  // A CPU truly that slow gets there sample by sample.
  for (int i = 0; i < 40; ++i) slow.add(1e-3, 1'000'000, /*warm=*/true);
  EXPECT_NEAR(slow.s_per_byte(), 1e-9, 1e-12);
  slow.add(1.0, 0, /*warm=*/true);  // nothing computed: nothing learned
  EXPECT_NEAR(slow.s_per_byte(), 1e-9, 1e-12);
}

}  // namespace
}  // namespace df::model
