#include "diskformer/backend/cpu/experts.h"

#include "diskformer/util/check.h"

namespace df::cpu {

void expert_products(Context& ctx, std::span<const model::ExpertWeights> ew, std::span<const int64_t> first,
                     const float* in, float* out, ExpertScratch& scratch, GateActivation act, bool shared_in,
                     bool cuda_order, const std::function<void()>& beside) {
  DF_CHECK(first.size() == ew.size() + 1);
  if (ew.empty()) {
    if (beside) beside();
    return;
  }
  const int64_t E = ew[0].gate.cols, F = ew[0].gate.rows, rows = first.back();
  scratch.gate.grow(uint64_t(rows * F));
  scratch.up.grow(uint64_t(rows * F));
  std::vector<MatmulJob> jobs;
  jobs.reserve(2 * ew.size());
  for (size_t i = 0; i < ew.size(); ++i) {
    const int64_t m = first[i + 1] - first[i];
    DF_CHECK(!shared_in || m == first[1] - first[0]);
    const float* x = shared_in ? in : in + first[i] * E;
    jobs.push_back({&ew[i].gate, x, m, scratch.gate.data() + first[i] * F, /*per_row=*/true, cuda_order});
    jobs.push_back({&ew[i].up, x, m, scratch.up.data() + first[i] * F, /*per_row=*/true, cuda_order});
  }
  matmul_many(ctx, jobs, beside);
  if (act == GateActivation::kGeGlu) {
    geglu(ctx, scratch.gate.data(), scratch.up.data(), rows * F, scratch.gate.data());
  } else {
    swiglu(ctx, scratch.gate.data(), scratch.up.data(), rows * F, scratch.gate.data());
  }
  jobs.clear();
  for (size_t i = 0; i < ew.size(); ++i) {
    const int64_t m = first[i + 1] - first[i];
    jobs.push_back(
        {&ew[i].down, scratch.gate.data() + first[i] * F, m, out + first[i] * E, /*per_row=*/true, cuda_order});
  }
  matmul_many(ctx, jobs);
}

}  // namespace df::cpu
