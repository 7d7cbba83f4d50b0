// The GPU plan's sizes against what the CUDA backend allocates: a session holds exactly the buffer table's bytes
// (one table sizes both), the weights the plan counts for the upload, and the device memory in use after CUDA
// initialization beside the plan's assumed context reserve (printed). A context whose KV cache the budget or the
// device cannot hold is refused with the numbers before anything is allocated.
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
#include "support/tiny_model.h"

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
  for (const char* name : {"qwen3moe-q4_0", "qwen3moe-q8_0", "mixtral-q4_0", "qwen3-q4_0", "llama-f16",
                           "qwen3moe-q4_k_m", "qwen3-q6_k", "qwen35moe-q8_0"}) {
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
      // The K-quant files' dense products prefill through dequantized tiles, whose workspace the session holds.
      bool dequant = f.tensors.output && cuda::dequant_prefill_type(f.tensors.output->type);
      for (const auto& l : f.tensors.layers)
        for (auto* w : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down, l.ssm_qkv, l.ssm_z, l.ssm_beta,
                        l.ssm_alpha, l.ssm_out, l.gate_shexp, l.up_shexp, l.down_shexp})
          dequant = dequant || (w && cuda::dequant_prefill_type(w->type));
      const uint64_t want =
          cuda::session_buffers(f.spec, {.n_ctx = 512, .max_batch = batch, .dequant_tiles = dequant}).total();
      EXPECT_EQ((*s)->device_bytes(), want) << "batch " << batch;
    }
  }
  cudaStreamDestroy(stream);
}

TEST(GpuPlanOnDevice, AContextThatDoesNotFitIsRefusedWithTheNumbers) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(path, "models/qwen3moe-q4_0.gguf");
  // Under a budget: the plan counts the KV cache of every position.
  auto budget = engine::Model::open(path.string(), {.n_ctx = 1 << 24, .backend = engine::Backend::kCuda,
                                                    .gpu = {.budget = 2ull << 30}});
  ASSERT_FALSE(budget.ok());
  EXPECT_NE(budget.error().message.find("KV cache 8.00 GiB at 16777216 positions"), std::string::npos)
      << budget.error().message;
  // Without one, a plan larger than the device: 16 layers of 16 key-value heads of 64, 1 TiB of KV cache at 2^24.
  TinyModel wide;
  wide.arch = "llama", wide.n_expert = 0, wide.n_layer = 16, wide.n_embd = 128, wide.n_head = 16;
  wide.n_head_kv = 16, wide.head_dim = 64;
  const std::string wide_path = (temp_dir("gpu_wide_kv") / "m.gguf").string();
  ASSERT_TRUE(write_tiny_model(wide_path, wide).ok());
  if (cuda::query_devices().total_bytes > (1ull << 40)) GTEST_SKIP() << "a device of more than 1 TiB";
  auto all = engine::Model::open(wide_path, {.n_ctx = 1 << 24, .backend = engine::Backend::kCuda});
  ASSERT_FALSE(all.ok());
  const std::string& e = all.error().message;
  EXPECT_NE(e.find("cannot hold this model at -c 16777216"), std::string::npos) << e;
  EXPECT_NE(e.find("KV cache 1.00 TiB at 16777216 positions"), std::string::npos) << e;
}

}  // namespace
}  // namespace df::test
