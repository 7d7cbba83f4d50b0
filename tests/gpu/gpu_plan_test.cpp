// The GPU plan's sizes against what the CUDA backend allocates: GpuSession::device_bytes() for the session buffers
// (the plan must not undercount them, and stays within a few MiB), GpuModel::device_bytes() for the weights, and the
// device memory in use after CUDA initialization beside the plan's assumed context reserve (printed).
#include <cuda_runtime.h>

#include <cstdio>

#include "diskformer/backend/cuda/gpu_forward.h"
#include "diskformer/engine/gpu_plan.h"
#include "diskformer/engine/model.h"
#include "diskformer/util/size.h"
#include "gpu/gpu_support.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

TEST(GpuPlanOnDevice, SessionAndWeightBytesMatchThePlan) {
  DF_REQUIRE_GPU();
  size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  std::printf("device memory in use after CUDA init: %s (this context and any other process); plan assumes %s\n",
              format_size(total_b - free_b).c_str(), format_size(engine::kGpuContextBytes).c_str());
  for (const char* name : {"qwen3moe-q4_0", "qwen3moe-q8_0", "mixtral-q4_0", "qwen3-q4_0", "llama-f16"}) {
    DF_REQUIRE_SHARED(path, std::string("models/") + name + ".gguf");
    SCOPED_TRACE(name);
    auto host = engine::Model::open(path.string(), {.n_ctx = 512, .threads = 0});
    ASSERT_TRUE(host.ok()) << host.error().message;
    auto gpu = cuda::GpuModel::upload((*host)->spec(), (*host)->weights());
    ASSERT_TRUE(gpu.ok()) << gpu.error().message;
    auto file = gguf::read_file(path.string());
    ASSERT_TRUE(file.ok());
    auto tensors = model::bind_tensors(*file, (*host)->spec());
    ASSERT_TRUE(tensors.ok());

    // Weights: the plan rounds each tensor up to 256 bytes; the upload allocates them exactly.
    auto all = engine::plan_gpu((*host)->spec(), *tensors, {.n_ctx = 512});
    ASSERT_TRUE(all.ok()) << all.error().message;
    const uint64_t planned = all->resident.weights() + all->pool_bytes(), uploaded = (*gpu)->device_bytes();
    std::printf("%s: weights planned %llu, uploaded %llu\n", name, (unsigned long long)planned,
                (unsigned long long)uploaded);
    EXPECT_GE(planned, uploaded);
    EXPECT_LE(planned - uploaded, 256 * file->tensors.size());

    for (uint32_t batch : {1u, 64u, 512u}) {
      auto s = cuda::GpuSession::create(**gpu, {.n_ctx = 512, .max_batch = batch, .grouped_experts = true});
      ASSERT_TRUE(s.ok()) << s.error().message;
      const uint64_t want = engine::gpu_session_bytes((*host)->spec(), 512, batch), got = (*s)->device_bytes();
      std::printf("%s, batch %u: session planned %llu, allocated %llu\n", name, batch, (unsigned long long)want,
                  (unsigned long long)got);
      EXPECT_GE(want, got) << "the plan undercounts GpuSession::allocate(): update gpu_session_bytes()";
      EXPECT_LE(want - got, 4ull << 20) << "the plan overcounts GpuSession::allocate(): update gpu_session_bytes()";
    }
  }
}

}  // namespace
}  // namespace df::test
