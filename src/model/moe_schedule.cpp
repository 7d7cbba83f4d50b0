#include "diskformer/model/moe_schedule.h"

#include <algorithm>

#include "diskformer/util/check.h"

namespace df::model {

void CpuRate::add(double seconds, uint64_t bytes, bool warm) {
  if (bytes == 0) return;
  double rate = seconds / double(bytes);
  if (warm) {
    rate = std::min(rate, 2 * (s_per_byte_ > 0 ? s_per_byte_ : kCpuGuessSPerByte));
    s_per_byte_ = s_per_byte_ > 0 ? 0.75 * s_per_byte_ + 0.25 * rate : rate;
  } else if (rate < (s_per_byte_ > 0 ? s_per_byte_ : kCpuGuessSPerByte)) {
    s_per_byte_ = rate;
  }
}

int64_t cpu_share_count(std::span<const double> cpu_s, double copy_s) {
  const int64_t missed = int64_t(cpu_s.size());
  int64_t best = 0;
  double cpu = 0, best_time = double(missed) * copy_s;
  for (int64_t c = 1; c <= missed; ++c) {
    cpu += cpu_s[size_t(c - 1)];
    const double t = std::max(cpu, double(missed - c) * copy_s);
    if (t < best_time) best = c, best_time = t;
  }
  return best;
}

void schedule_moe(const MoeStep& s, MoeSchedule& out) {
  DF_CHECK(s.n_expert > 0 && s.n_used > 0 && s.max_group >= uint32_t(s.n_used));
  const int64_t nk = int64_t(s.n_tok) * s.n_used;
  DF_CHECK(int64_t(s.ids.size()) == nk);
  out.distinct.clear();
  out.gpu.clear();
  out.groups.clear();
  out.cpu.clear();
  out.prefetch_compute.clear();
  out.prefetch_ram.clear();
  out.where.assign(size_t(s.n_expert), -1);
  for (int64_t v = 0; v < nk; ++v) {
    const int32_t e = s.ids[size_t(v)];
    DF_CHECK(e >= 0 && e < s.n_expert);
    if (out.where[size_t(e)] < 0) {
      out.where[size_t(e)] = 0;  // seen; the index into gpu comes below
      out.distinct.push_back(e);
    }
  }
  out.missed = 0;
  std::vector<int32_t>& missed = out.prefetch_ram;  // scratch until the reads ahead are chosen
  for (int32_t e : out.distinct)
    if (!s.resident || !s.resident(e)) missed.push_back(e);
  out.missed = int64_t(missed.size());
  if (s.cpu_share && !missed.empty()) {
    const double bytes = double(s.record_bytes);
    const double copy = bytes * (s.copy_s_per_byte > 0 ? s.copy_s_per_byte : kCopyGuessSPerByte);
    const double cpu = bytes * (s.cpu_s_per_byte > 0 ? s.cpu_s_per_byte : kCpuGuessSPerByte);
    // The CPU's candidates, cheapest first: the fewest rows, then the last in routing order (one token: the last
    // missed ones).
    std::vector<int64_t> rows(size_t(s.n_expert), 0);
    for (int64_t v = 0; v < nk; ++v) ++rows[size_t(s.ids[size_t(v)])];
    std::vector<int32_t> order(missed.rbegin(), missed.rend());
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return rows[size_t(a)] < rows[size_t(b)]; });
    std::vector<double> cost;
    for (int32_t e : order) cost.push_back(cpu * cpu_rows_weight(rows[size_t(e)]));
    const int64_t c = std::max<int64_t>(cpu_share_count(cost, copy),
                                        std::min<int64_t>(s.min_cpu, int64_t(missed.size()) - 1));
    // Of those, the ones RAM holds (the CPU never waits for the disk); listed in routing order.
    std::vector<bool> chosen(size_t(s.n_expert), false);
    int64_t taken = 0;
    for (auto it = order.begin(); it != order.end() && taken < c; ++it)
      if (!s.in_ram || s.in_ram(*it)) chosen[size_t(*it)] = true, ++taken;
    for (int32_t e : missed)
      if (chosen[size_t(e)]) out.cpu.push_back(e);
  }
  missed.clear();
  for (int32_t e : out.distinct)
    if (std::find(out.cpu.begin(), out.cpu.end(), e) == out.cpu.end()) {
      out.where[size_t(e)] = int32_t(out.gpu.size());
      out.gpu.push_back(e);
    } else {
      out.where[size_t(e)] = -1;
    }
  const int64_t D = int64_t(out.gpu.size()), cap = s.max_group;
  const int64_t G = D <= (s.overlap ? cap / 2 : cap) ? D : std::max<int64_t>(s.n_used, s.overlap ? cap / 2 : cap);
  for (int64_t g0 = 0; g0 < D; g0 += G) out.groups.push_back({int32_t(g0), int32_t(std::min(D, g0 + G))});

  for (int32_t e : s.guess) {
    if (e < 0 || e >= s.n_expert) continue;
    const bool in_ram = !s.next_in_ram || s.next_in_ram(e);
    if (s.next_resident && s.next_resident(e)) continue;
    if (in_ram) {
      if (int64_t(out.prefetch_compute.size()) < s.max_prefetch_compute) out.prefetch_compute.push_back(e);
    } else {
      out.prefetch_ram.push_back(e);
    }
  }
}

}  // namespace df::model
