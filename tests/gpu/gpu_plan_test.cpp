// The GPU plan's sizes against what the CUDA backend allocates: a session holds exactly the buffer table's bytes
// (one table sizes both), the weights the plan counts for the upload, and the device memory in use after CUDA
// initialization beside the plan's assumed context reserve (printed).
#include <cuda_runtime.h>

#include <cstdio>

#include "diskformer/backend/cuda/plan.h"
#include "diskformer/backend/cuda/session.h"
#include "diskformer/backend/cuda/weights.h"
#include "diskformer/engine/model_files.h"
#include "diskformer/engine/tensor_reader.h"
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
              format_size(total_b - free_b).c_str(), format_size(cuda::kGpuContextBytes).c_str());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (const char* name : {"qwen3moe-q4_0", "qwen3moe-q8_0", "mixtral-q4_0", "qwen3-q4_0", "llama-f16"}) {
    DF_REQUIRE_SHARED(path, std::string("models/") + name + ".gguf");
    SCOPED_TRACE(name);
    auto files = engine::open_model_files(path.string());
    ASSERT_TRUE(files.ok()) << files.error().message;
    const engine::ModelFiles& f = **files;
    auto reader = engine::TensorReader::open(f.records);
    ASSERT_TRUE(reader.ok());
    auto weights = cuda::GpuWeights::upload(f.spec, f.tensors, **reader);
    ASSERT_TRUE(weights.ok()) << weights.error().message;

    // Weights: the plan rounds each tensor up to 256 bytes (the experts per record); the upload holds them exactly.
    auto all = cuda::plan_gpu(f.spec, f.tensors, f.layouts, {.n_ctx = 512});
    ASSERT_TRUE(all.ok()) << all.error().message;
    const uint64_t planned = all->resident.weights() + all->pool_bytes(), uploaded = (*weights)->device_bytes();
    std::printf("%s: weights planned %llu, uploaded %llu\n", name, (unsigned long long)planned,
                (unsigned long long)uploaded);
    EXPECT_GE(planned, uploaded);
    EXPECT_LE(planned - uploaded, 256 * (f.file.tensors.size() + all->n_records * 3));

    cuda::GpuModel m{.spec = f.spec, .weights = weights->get(), .stream = stream};
    for (uint32_t batch : {1u, 64u, 512u}) {
      auto s = cuda::GpuSession::create(m, {.n_ctx = 512, .max_batch = batch, .grouped_experts = true});
      ASSERT_TRUE(s.ok()) << s.error().message;
      const uint64_t want = cuda::session_buffers(f.spec, {.n_ctx = 512, .max_batch = batch}).total();
      EXPECT_EQ((*s)->device_bytes(), want) << "batch " << batch;
    }
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace df::test
