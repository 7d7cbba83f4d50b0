// Where the routed experts of one MoE layer run, for every backend and residency: given the router's choices, what
// the compute tier (the GPU tier, or the RAM tier on the CPU backend) holds, and the rates measured so far, it
// returns
//   - the groups of experts the compute tier makes resident one after another (each group at most `max_group`;
//     with `overlap`, groups of half that once the experts outgrow it, so the next group's loads run under this
//     group's products);
//   - the experts the CPU computes from RAM instead (decode under a GPU budget, one sequence or several): of those
//     the compute tier misses and RAM holds, the fewest-used first, as many as finish no later than the copies of
//     the rest, from the measured per-byte rates;
//   - what to read ahead for the next layer in each tier, from a guess of its experts (its router applied to the
//     current hidden state): into the compute tier what RAM holds (the likeliest, as many as the caller allows),
//     into RAM what it does not.
// Host code with no GPU in it; the forward passes execute what it says.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace df::model {

// The rates that stand in until one is measured: a PCIe 5 x16 link, and 16 cores reading expert weights.
inline constexpr double kCopyGuessSPerByte = 1.0 / 50e9, kCpuGuessSPerByte = 1.0 / 20e9;

struct MoeStep {
  std::span<const int32_t> ids;  // [n_tok][n_used]: the router's choices
  int32_t n_tok = 0, n_used = 0, n_expert = 0;
  uint32_t max_group = 0;        // experts the compute tier can hold at once (>= n_used)
  bool overlap = false;          // split into half-size groups once the experts do not fit in one
  // Missing experts may be computed on the CPU (decode: a GPU tier over RAM the CPU can read).
  bool cpu_share = false;
  std::function<bool(int32_t)> resident;  // expert e is in the compute tier now (nullptr: none is)
  std::function<bool(int32_t)> in_ram;    // expert e is in RAM now, for the CPU to read (nullptr: all are)
  uint64_t record_bytes = 0;     // of one expert
  double copy_s_per_byte = 0;    // into the compute tier, as measured (0: not yet; kCopyGuessSPerByte stands in)
  double cpu_s_per_byte = 0;     // the CPU computing an expert, per weight byte (0: not yet; kCpuGuessSPerByte stands in)
  // At least this many of the missed experts go to the CPU (where it may share): a rate measured once too slow
  // (a cold pool, a busy machine) would otherwise never be measured again.
  int32_t min_cpu = 0;
  // The next layer: its guessed experts, likeliest first, and what its tiers hold (nullptr: hold nothing).
  std::span<const int32_t> guess;
  // Reads ahead into the compute tier: at most this many (the likeliest guesses), so that they fill the link's idle
  // time and never delay the next layer's own copies.
  int32_t max_prefetch_compute = INT32_MAX;
  std::function<bool(int32_t)> next_resident, next_in_ram;
};

struct MoeSchedule {
  std::vector<int32_t> distinct;  // every routed expert once, in first-use order
  std::vector<int32_t> gpu;       // distinct less the CPU's, in that order; groups cut it
  std::vector<int32_t> where;     // [n_expert]: index into gpu, -1 where not routed or on the CPU
  std::vector<std::pair<int32_t, int32_t>> groups;  // [first, end) ranges of gpu
  std::vector<int32_t> cpu;       // experts the CPU computes, in routing order
  std::vector<int32_t> prefetch_compute, prefetch_ram;  // the next layer's reads ahead per tier
  int64_t missed = 0;             // distinct experts the compute tier did not hold (the CPU's share included)
};

// The CPU's time per expert byte, from the shares it computed. A share that found the CPU's threads asleep (`warm`
// false) paid their wake-ups and cold caches: such a sample only ever looks slower than shares computed layer after
// layer, so it may lower the estimate but never raise it. Taken whole, one of them cut the share to nothing, and the
// occasional one-expert samples that followed were cold again: decode stayed at the link's speed. A warm sample counts
// as at most twice the estimate (the stand-in before the first), so that one share slowed by a page fault or a
// preempted thread moves it by a quarter of that, not to a rate at which the CPU gets no share again; a CPU that is
// truly slower gets there over a few samples.
class CpuRate {
 public:
  double s_per_byte() const { return s_per_byte_; }  // 0 until measured (kCpuGuessSPerByte stands in)
  void add(double seconds, uint64_t bytes, bool warm);

 private:
  double s_per_byte_ = 0;
};

// Fills `out` (its vectors are reused from call to call).
void schedule_moe(const MoeStep& step, MoeSchedule& out);

// The CPU's time for an expert that `rows` tokens of a step routed to, in units of one row's: it reads the weights
// once, and each further row adds its products, which cost about a quarter of the read at decode's sizes (a
// guess the measured rate absorbs: CpuRate learns per byte of this weight).
inline double cpu_rows_weight(int64_t rows) { return 1.0 + 0.25 * double(std::max<int64_t>(rows, 1) - 1); }

// The CPU's share of the missed experts that would otherwise be copied, each `copy_s` apart, when cpu_s holds the
// CPU's time for each of them in the order it would take them (cheapest first): c minimizing max(cpu_s[0] + ... +
// cpu_s[c - 1], (missed - c) * copy_s) (ties: fewer on the CPU).
int64_t cpu_share_count(std::span<const double> cpu_s, double copy_s);

}  // namespace df::model
