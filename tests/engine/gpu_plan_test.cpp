// The GPU residency plan: on Qwen3-30B-A3B's exact shape (a header built in memory, no 16 GiB file) against sizes
// worked out by hand from the tensor shapes, and on the shared models: itemized totals, slots against the budget,
// refusals with their numbers, the all-resident cap, dense models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "diskformer/backend/cuda/plan.h"
#include "diskformer/model/records.h"
#include "diskformer/store/record.h"
#include "diskformer/gguf/reader.h"
#include "diskformer/util/size.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

using cuda::GpuPlan;
using gguf::GgmlType;

constexpr uint64_t kMiB = 1ull << 20;

// A qwen3moe GGUF header (metadata and tensor index, no data) of Qwen3-30B-A3B's shape in Q4_0, as
// `diskformer synth --preset qwen3-30b-a3b` writes it: 48 layers, d=2048, 32/4 heads of 128, 128 experts top-8 of
// width 768, vocabulary 151,936, separate output head.
gguf::File qwen3_30b_header() {
  gguf::File f;
  f.path = "qwen3-30b-a3b (in memory)";
  const std::string a = "qwen3moe.";
  auto u32 = [&](const std::string& k, uint32_t v) { f.metadata.push_back({k, gguf::Value::u32(v), 0}); };
  f.metadata.push_back({"general.architecture", gguf::Value::string("qwen3moe"), 0});
  u32(a + "block_count", 48);
  u32(a + "context_length", 40960);
  u32(a + "embedding_length", 2048);
  u32(a + "feed_forward_length", 6144);
  u32(a + "attention.head_count", 32);
  u32(a + "attention.head_count_kv", 4);
  u32(a + "attention.key_length", 128);
  u32(a + "attention.value_length", 128);
  u32(a + "expert_count", 128);
  u32(a + "expert_used_count", 8);
  u32(a + "expert_feed_forward_length", 768);
  uint64_t offset = 4096;
  auto tensor = [&](const std::string& name, GgmlType type, std::vector<uint64_t> shape) {
    gguf::TensorInfo t{.name = name, .type = type, .shape = shape};
    t.n_elements = 1;
    for (uint64_t d : shape) t.n_elements *= d;
    const auto* info = gguf::type_info(type);
    t.n_bytes = t.n_elements / info->block_elems * info->block_bytes;
    t.offset = offset;
    offset += (t.n_bytes + 31) / 32 * 32;
    f.tensors.push_back(t);
  };
  const GgmlType q = GgmlType::Q4_0, f32 = GgmlType::F32;
  tensor("token_embd.weight", q, {2048, 151936});
  for (int l = 0; l < 48; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    tensor(b + "attn_norm.weight", f32, {2048});
    tensor(b + "attn_q.weight", q, {2048, 4096});
    tensor(b + "attn_k.weight", q, {2048, 512});
    tensor(b + "attn_v.weight", q, {2048, 512});
    tensor(b + "attn_output.weight", q, {4096, 2048});
    tensor(b + "attn_q_norm.weight", f32, {128});
    tensor(b + "attn_k_norm.weight", f32, {128});
    tensor(b + "ffn_norm.weight", f32, {2048});
    tensor(b + "ffn_gate_inp.weight", f32, {2048, 128});
    tensor(b + "ffn_gate_exps.weight", q, {2048, 768, 128});
    tensor(b + "ffn_up_exps.weight", q, {2048, 768, 128});
    tensor(b + "ffn_down_exps.weight", q, {768, 2048, 128});
  }
  tensor("output_norm.weight", f32, {2048});
  tensor("output.weight", q, {2048, 151936});
  f.file_size = offset;
  f.reindex();
  return f;
}

struct Bound {
  gguf::File file;
  model::ModelSpec spec;
  model::ModelTensors tensors;
  model::RecordLayouts layouts;
};

// The tensor bindings point into `file`: the caller keeps the Bound where it is.
void bind(Bound& b) {
  auto spec = model::spec_from_gguf(b.file);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  b.spec = *spec;
  auto t = model::bind_tensors(b.file, b.spec);
  ASSERT_TRUE(t.ok()) << t.error().message;
  b.tensors = *t;
  auto map = store::RecordMap::in_place(b.file);
  ASSERT_TRUE(map.ok()) << map.error().message;
  auto l = model::record_layouts(b.spec, b.tensors, *map);
  ASSERT_TRUE(l.ok()) << l.error().message;
  b.layouts = *l;
}

void bind_shared(Bound& b, const std::filesystem::path& path) {
  auto f = gguf::read_file(path.string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  b.file = std::move(*f);
  bind(b);
}

GpuPlan plan_ok(const Bound& b, cuda::GpuPlanOptions o) {
  auto p = cuda::plan_gpu(b.spec, b.tensors, b.layouts, o);
  EXPECT_TRUE(p.ok()) << p.error().message;
  return p.ok() ? *p : GpuPlan{};
}

// The buffers a streaming session adds for its expert groups (buffers.h), over a resident one's.
uint64_t streaming_extra(const Bound& b, uint32_t n_ctx, uint32_t max_batch = 512) {
  return cuda::session_buffers(b.spec, {.n_ctx = n_ctx, .max_batch = max_batch, .streams_experts = true}).total() -
         cuda::session_buffers(b.spec, {.n_ctx = n_ctx, .max_batch = max_batch}).total();
}

// Q4_0: 18 bytes per 32 values.
constexpr uint64_t q4(uint64_t rows, uint64_t cols) { return rows * (cols / 32 * 18); }

// Every resident item of Qwen3-30B-A3B's shape at -c 1024 and batches of 512, from the shapes.
TEST(GpuPlan, Qwen30BShapeItemsAsTheGpuStoresThem) {
  Bound b{qwen3_30b_header()};
  ASSERT_NO_FATAL_FAILURE(bind(b));
  const GpuPlan p = plan_ok(b, {.n_ctx = 1024, .max_batch = 512});
  const cuda::GpuResident& r = p.resident;
  EXPECT_EQ(r.context, 512 * kMiB);
  EXPECT_EQ(r.token_embd, q4(151936, 2048));
  EXPECT_EQ(r.output, q4(151936, 2048));
  EXPECT_EQ(r.attention, 48 * (q4(4096, 2048) + 2 * q4(512, 2048) + q4(2048, 4096)));
  EXPECT_EQ(r.norms, 48 * (2 * 2048 * 4 + 2 * 128 * 4) + 2048 * 4);
  EXPECT_EQ(r.routers, 48ull * 128 * 2048 * 4);
  EXPECT_EQ(r.dense_ffn, 0u);
  EXPECT_EQ(r.kv_cache, 48ull * 1024 * (512 + 512) * 2);
  // A session's buffers for B = 512 tokens, K = 8 experts each, E = 2048, widest FFN 6144.
  const uint64_t B = 512, K = 8, E = 2048;
  const uint64_t work = 1024 * 64 * 2 * 4              // RoPE table: 1024 positions x 64 (cos, sin)
                        + 2 * B * 4                    // token ids, positions
                        + 3 * B * E * 4                // x, xn, proj
                        + B * (4096 + 512 + 512 + 4096) * 4  // q, k, v, attention output
                        + 32 * 128 * (128 + 2) * 4     // split attention: 32 heads x 128 parts x (128 sums, max, sum)
                        + 2 * B * 6144 * 4             // gate, up
                        + B * 128 * 4                  // router logits
                        + 3 * B * K * 4                // expert ids, weights, order
                        + B * K * E * 4                // expert outputs
                        + (1 + 3 * (B * K / 8 + 128)) * 4  // expert tiles
                        + B * K * E * 4                // gathered expert inputs
                        + (6144 / 32 + 1) * 34 * B * K  // Q8_0 activations of the widest input
                        + 151936 * 4 + 4;              // logits, argmax
  EXPECT_EQ(r.work, work);
  EXPECT_EQ(cuda::session_buffers(b.spec, {.n_ctx = 1024, .max_batch = 512}).total(), work + r.kv_cache);
  EXPECT_EQ(r.margin, cuda::kGpuMarginBytes);
  EXPECT_EQ(r.total(), r.context + r.token_embd + r.output + r.attention + r.norms + r.routers + r.kv_cache + r.work +
                           r.margin);
  // One record: gate, up, down of one expert, 2.65 MB as DESIGN.md measures it.
  EXPECT_EQ(p.record_bytes, 3 * q4(768, 2048));
  EXPECT_EQ(p.record_bytes, 2654208u);
  EXPECT_EQ(p.n_records, 48u * 128);
  EXPECT_EQ(p.min_slots, 16u);

  // No budget: every expert resident, the pool exactly the expert tensors of the file.
  EXPECT_FALSE(p.stream_experts);
  EXPECT_FALSE(p.budget);
  EXPECT_EQ(p.slots, p.n_records);
  EXPECT_EQ(p.pool_bytes(), 48 * 3 * 128 * q4(768, 2048));
  EXPECT_DOUBLE_EQ(p.resident_fraction(), 1.0);

  // The JSON's items add up to its totals.
  const nlohmann::json j = p.to_json();
  uint64_t sum = 0;
  for (const auto& [k, v] : j["resident_bytes"].items())
    if (k != "total") sum += v.get<uint64_t>();
  EXPECT_EQ(sum, j["resident_bytes"]["total"].get<uint64_t>());
  EXPECT_EQ(j["total_bytes"].get<uint64_t>(), sum + j["pool_bytes"].get<uint64_t>());
  EXPECT_EQ(j["pool_bytes"].get<uint64_t>(), j["slots"].get<uint64_t>() * j["record_bytes"].get<uint64_t>());
  EXPECT_TRUE(j["budget"].is_null());
}

// The budgets: more memory, more slots; each plan fits its budget and leaves less than one record unused.
TEST(GpuPlan, Qwen30BShapeSlotsGrowWithTheBudget) {
  Bound b{qwen3_30b_header()};
  ASSERT_NO_FATAL_FAILURE(bind(b));
  uint32_t last = 0;
  for (const char* text : {"1.8G", "4.4G", "9.5G"}) {
    const uint64_t budget = *parse_size(text);
    const GpuPlan p = plan_ok(b, {.budget = budget, .n_ctx = 1024, .max_batch = 512});
    SCOPED_TRACE(text);
    EXPECT_TRUE(p.stream_experts);
    EXPECT_GT(p.slots, last);
    EXPECT_GE(p.slots, p.min_slots);
    EXPECT_LT(p.slots, p.n_records);
    EXPECT_LE(p.total_bytes(), budget);
    EXPECT_LT(budget - p.total_bytes(), p.record_bytes);
    EXPECT_EQ(p.to_json()["budget"].get<uint64_t>(), budget);
    EXPECT_NE(p.describe().find(std::to_string(p.slots) + " expert slots"), std::string::npos) << p.describe();
    last = p.slots;
  }
  // A measured CUDA context smaller than the default reserve leaves room for more slots.
  const GpuPlan lean = plan_ok(b, {.budget = *parse_size("1.8G"), .n_ctx = 1024, .context_bytes = 300 * kMiB});
  const GpuPlan standard = plan_ok(b, {.budget = *parse_size("1.8G"), .n_ctx = 1024});
  EXPECT_EQ(lean.resident.total(), standard.resident.total() - 212 * kMiB);
  EXPECT_EQ(lean.slots, (*parse_size("1.8G") - lean.resident.total()) / lean.record_bytes);
  EXPECT_GE(lean.slots, standard.slots + 212 * kMiB / standard.record_bytes);
}

// Without --gpu-budget: the 30B shape (16 GiB) on GPUs of 8 to 16 GiB takes the device less 5% (at least 256 MiB),
// and that budget plans; on a device that holds it, or for a model with nothing to stream, no budget is chosen.
TEST(GpuPlan, AModelLargerThanTheGpuTakesItsMemoryLessAHeadroom) {
  Bound b{qwen3_30b_header()};
  ASSERT_NO_FATAL_FAILURE(bind(b));
  const GpuPlan all = plan_ok(b, {.n_ctx = 4096});
  for (const uint64_t gib : {8, 12, 16}) {
    SCOPED_TRACE(gib);
    const uint64_t device = gib << 30;
    const auto budget = cuda::automatic_budget(all, device, true);
    ASSERT_TRUE(budget.has_value());
    EXPECT_EQ(*budget, device - std::max<uint64_t>(256 * kMiB, device / 20));
    const GpuPlan p = plan_ok(b, {.budget = budget, .n_ctx = 4096});
    EXPECT_TRUE(p.stream_experts);
    EXPECT_LE(p.total_bytes(), *budget);
  }
  ASSERT_LT(all.total_bytes(), 24ull << 30);
  EXPECT_EQ(cuda::automatic_budget(all, 24ull << 30, true), std::nullopt);  // a 24 GiB GPU holds it all
  EXPECT_EQ(cuda::automatic_budget(all, 12ull << 30, false), std::nullopt);  // nothing to stream: refused instead
  EXPECT_EQ(cuda::automatic_budget(all, 0, true), std::nullopt);             // no device size known
  EXPECT_EQ(*cuda::automatic_budget(all, 4ull << 30, true), (4ull << 30) - 256 * kMiB);  // the least headroom
}

// Just enough for the resident part and 16 records runs with 16 slots; one byte less is refused, and the message
// names the budget, the need and the items.
TEST(GpuPlan, TooSmallBudgetIsRefusedWithTheNumbers) {
  Bound b{qwen3_30b_header()};
  ASSERT_NO_FATAL_FAILURE(bind(b));
  const GpuPlan all = plan_ok(b, {.n_ctx = 1024});
  // Streaming leaves the token embeddings in host RAM (the head is not tied to them).
  const uint64_t need =
      all.resident.total() - all.resident.token_embd + streaming_extra(b, 1024) + 16 * all.record_bytes;
  const GpuPlan tight = plan_ok(b, {.budget = need, .n_ctx = 1024});
  EXPECT_TRUE(tight.stream_experts);
  EXPECT_EQ(tight.slots, 16u);
  EXPECT_EQ(tight.total_bytes(), need);
  EXPECT_TRUE(tight.token_embd_on_host);
  EXPECT_EQ(tight.resident.token_embd, 0u);

  auto refused = cuda::plan_gpu(b.spec, b.tensors, b.layouts, {.budget = need - 1, .n_ctx = 1024});
  ASSERT_FALSE(refused.ok());
  const std::string& m = refused.error().message;
  for (const std::string& part : {std::to_string(need - 1) + " bytes", std::to_string(need) + " bytes",
                                  std::string("16 expert slots of ") + format_size(all.record_bytes),
                                  "KV cache " + format_size(all.resident.kv_cache) + " at 1024 positions",
                                  std::string("token embeddings in pinned host RAM"), std::string("CUDA context")})
    EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in: " << m;
  EXPECT_FALSE(cuda::plan_gpu(b.spec, b.tensors, b.layouts, {.budget = 1 * kMiB}).ok());
}

// Enough for every expert: all resident, no pool beyond the model's experts. One byte less streams: the token
// embeddings move to host RAM, which frees room for every expert again.
TEST(GpuPlan, EveryExpertFitsMeansAllResident) {
  Bound b{qwen3_30b_header()};
  ASSERT_NO_FATAL_FAILURE(bind(b));
  const GpuPlan all = plan_ok(b, {.n_ctx = 1024});
  const GpuPlan at = plan_ok(b, {.budget = all.total_bytes(), .n_ctx = 1024});
  EXPECT_FALSE(at.stream_experts);
  EXPECT_EQ(at.slots, at.n_records);
  const GpuPlan huge = plan_ok(b, {.budget = 1ull << 40, .n_ctx = 1024});
  EXPECT_FALSE(huge.stream_experts);
  EXPECT_EQ(huge.slots, huge.n_records);
  EXPECT_EQ(huge.total_bytes(), all.total_bytes());
  const GpuPlan under = plan_ok(b, {.budget = all.total_bytes() - 1, .n_ctx = 1024});
  EXPECT_TRUE(under.stream_experts);
  EXPECT_TRUE(under.token_embd_on_host);
  EXPECT_EQ(under.slots, under.n_records);
  const uint64_t no_embd = all.total_bytes() - all.resident.token_embd + streaming_extra(b, 1024);
  const GpuPlan fewer = plan_ok(b, {.budget = no_embd - 1, .n_ctx = 1024});
  EXPECT_EQ(fewer.slots, fewer.n_records - 1);
}

// The KV cache and work buffers follow -c and the batch size; the slots pay for them.
TEST(GpuPlan, ContextAndBatchCostSlots) {
  Bound b{qwen3_30b_header()};
  ASSERT_NO_FATAL_FAILURE(bind(b));
  const uint64_t budget = 4ull << 30;
  const GpuPlan short_ctx = plan_ok(b, {.budget = budget, .n_ctx = 1024});
  const GpuPlan long_ctx = plan_ok(b, {.budget = budget, .n_ctx = 8192});
  EXPECT_EQ(long_ctx.resident.kv_cache, 8 * short_ctx.resident.kv_cache);
  EXPECT_LT(long_ctx.slots, short_ctx.slots);
  const GpuPlan small_batch = plan_ok(b, {.budget = budget, .n_ctx = 1024, .max_batch = 64});
  EXPECT_LT(small_batch.resident.work, short_ctx.resident.work);
  EXPECT_GT(small_batch.slots, short_ctx.slots);
}

// Sessions (the server's --parallel) each hold a KV cache, RoPE table and logits, and share one set of work buffers.
TEST(GpuPlan, SessionsShareTheirWorkBuffers) {
  Bound b{qwen3_30b_header()};
  ASSERT_NO_FATAL_FAILURE(bind(b));
  for (std::optional<uint64_t> budget : {std::optional<uint64_t>{}, std::optional<uint64_t>(4ull << 30)}) {
    const GpuPlan one = plan_ok(b, {.budget = budget, .n_ctx = 1024, .max_batch = 64});
    const GpuPlan four = plan_ok(b, {.budget = budget, .n_ctx = 1024, .max_batch = 64, .sessions = 4});
    EXPECT_EQ(four.resident.kv_cache, 4 * one.resident.kv_cache);
    const cuda::BufferTable t =
        cuda::session_buffers(b.spec, {.n_ctx = 1024, .max_batch = 64, .streams_experts = budget.has_value()});
    const uint64_t own_rest = t.own() - t[cuda::Buf::k_cache] - t[cuda::Buf::v_cache];
    EXPECT_EQ(one.resident.work, t.shared() + own_rest);
    EXPECT_EQ(four.resident.work, one.resident.work + 3 * own_rest);
    EXPECT_LT(own_rest, t.shared() / 4) << "a session's own rest is its RoPE table and logits";
  }
}

// The shared qwen3moe models: the weights the GPU holds are the file's tensors, and the slots grow with the budget.
TEST(GpuPlan, SharedMoeModels) {
  for (const char* name : {"models/qwen3moe-q4_0.gguf", "models/qwen3moe-q8_0.gguf", "models/mixtral-q4_0.gguf"}) {
    DF_REQUIRE_SHARED(path, name);
    SCOPED_TRACE(name);
    Bound b;
    ASSERT_NO_FATAL_FAILURE(bind_shared(b, path));
    const GpuPlan all = plan_ok(b, {.n_ctx = 512, .context_bytes = 0});
    uint64_t experts = 0, others = 0;
    for (const auto& t : b.file.tensors)
      (t.name.find("_exps.") != std::string::npos ? experts : others) += (t.n_bytes + 255) / 256 * 256;
    EXPECT_EQ(all.pool_bytes(), experts);
    EXPECT_EQ(all.resident.weights(), others);
    EXPECT_EQ(all.n_records, b.spec.n_layer * b.spec.n_expert);
    EXPECT_EQ(all.min_slots, 2 * b.spec.n_expert_used);

    // Streaming keeps an untied model's token embeddings in host RAM.
    const bool tied = b.tensors.output == b.tensors.token_embd;
    const uint64_t base = all.resident.total() - (tied ? 0 : all.resident.token_embd) + streaming_extra(b, 512);
    uint32_t last = 0;
    for (uint32_t want : {all.min_slots, all.min_slots + 3, all.n_records / 2, all.n_records - 1}) {
      const uint64_t budget = base + uint64_t(want) * all.record_bytes + all.record_bytes / 2;
      const GpuPlan p = plan_ok(b, {.budget = budget, .n_ctx = 512, .context_bytes = 0});
      EXPECT_EQ(p.slots, want);
      EXPECT_GT(p.slots, last);
      EXPECT_TRUE(p.stream_experts);
      EXPECT_EQ(p.token_embd_on_host, !tied);
      last = p.slots;
    }
    EXPECT_FALSE(cuda::plan_gpu(b.spec, b.tensors, b.layouts,
                                  {.budget = base + all.min_slots * all.record_bytes - 1,
                                   .n_ctx = 512, .context_bytes = 0})
                     .ok());
  }
}

// The K-quant and IQ4 files: records mix types (gate and up of one, down of another) and layers differ (some
// layers' down projections in Q6_K), so a GPU slot is the largest layer's record, plane by plane; the weights the
// GPU holds are the file's tensors at their own sizes; and their dense products prefill through dequantized tiles,
// whose workspace every session counts.
TEST(GpuPlan, KQuantRecordsAndPrefillTilesAtTheirRealSizes) {
  for (const char* name : {"models/qwen3moe-q4_k_m.gguf", "models/qwen3moe-q3_k_m.gguf",
                           "models/qwen3moe-iq4_xs.gguf", "models/mixtral-q5_k_m.gguf"}) {
    DF_REQUIRE_SHARED(path, name);
    SCOPED_TRACE(name);
    Bound b;
    ASSERT_NO_FATAL_FAILURE(bind_shared(b, path));
    const GpuPlan all = plan_ok(b, {.n_ctx = 512, .context_bytes = 0});
    uint64_t plane[3] = {0, 0, 0}, experts = 0, others = 0;
    bool layers_differ = false;
    std::string mix;
    for (const auto& l : b.tensors.layers) {
      const gguf::TensorInfo* parts[3] = {l.gate_exps, l.up_exps, l.down_exps};
      for (int i = 0; i < 3; ++i) {
        ASSERT_NE(parts[i], nullptr);
        const uint64_t one = parts[i]->n_bytes / b.spec.n_expert;
        plane[i] = std::max(plane[i], (one + 255) / 256 * 256);
      }
      const std::string m = std::string(gguf::type_name(l.gate_exps->type)) + "/" +
                            std::string(gguf::type_name(l.up_exps->type)) + "/" +
                            std::string(gguf::type_name(l.down_exps->type));
      layers_differ = layers_differ || (!mix.empty() && mix.find(m) == std::string::npos);
      if (mix.find(m) == std::string::npos) mix += (mix.empty() ? "" : ", ") + m;
    }
    std::printf("[gpu-plan] %s: expert types (gate/up/down) %s; layers differ %d; record %llu bytes\n", name,
                mix.c_str(), layers_differ, (unsigned long long)all.record_bytes);
    EXPECT_EQ(all.record_bytes, plane[0] + plane[1] + plane[2]);
    for (const auto& t : b.file.tensors)
      (t.name.find("_exps.") != std::string::npos ? experts : others) += (t.n_bytes + 255) / 256 * 256;
    EXPECT_EQ(all.resident.weights(), others);
    EXPECT_EQ(all.pool_bytes(), experts);  // all resident: the file's tensors, not n_records of the largest record
    EXPECT_EQ(all.experts_bytes, experts);
    if (layers_differ) {
      EXPECT_LT(all.experts_bytes, uint64_t(all.n_records) * all.record_bytes);
    }

    const cuda::BufferTable with = cuda::session_buffers(b.spec, {.n_ctx = 512, .max_batch = 512, .dequant_tiles = true});
    EXPECT_GT(with[cuda::Buf::dequant], 0u);
    EXPECT_EQ(all.resident.work + all.resident.kv_cache, with.total());

    // The smallest budget holds 2 x n_used of those slots; one byte less is refused.
    const bool tied = b.tensors.output == b.tensors.token_embd;
    const uint64_t base = all.resident.total() - (tied ? 0 : all.resident.token_embd) + streaming_extra(b, 512);
    const uint64_t smallest = base + uint64_t(all.min_slots) * all.record_bytes;
    const GpuPlan p = plan_ok(b, {.budget = smallest, .n_ctx = 512, .context_bytes = 0});
    EXPECT_TRUE(p.stream_experts);
    EXPECT_EQ(p.slots, all.min_slots);
    EXPECT_FALSE(cuda::plan_gpu(b.spec, b.tensors, b.layouts, {.budget = smallest - 1, .n_ctx = 512, .context_bytes = 0})
                     .ok());
  }
}

// Dense models do not stream on the GPU: all or nothing, and the refusal itemizes the need.
TEST(GpuPlan, DenseModelsMustFitWhole) {
  for (const char* name : {"models/qwen3-q4_0.gguf", "models/llama-f16.gguf"}) {
    DF_REQUIRE_SHARED(path, name);
    SCOPED_TRACE(name);
    Bound b;
    ASSERT_NO_FATAL_FAILURE(bind_shared(b, path));
    const GpuPlan all = plan_ok(b, {.n_ctx = 256});
    EXPECT_FALSE(all.stream_experts);
    EXPECT_EQ(all.n_records, 0u);
    EXPECT_EQ(all.slots, 0u);
    EXPECT_EQ(all.record_bytes, 0u);
    EXPECT_GT(all.resident.dense_ffn, 0u);
    EXPECT_EQ(all.resident.routers, 0u);
    EXPECT_FALSE(plan_ok(b, {.budget = all.total_bytes(), .n_ctx = 256}).stream_experts);
    auto refused = cuda::plan_gpu(b.spec, b.tensors, b.layouts, {.budget = all.total_bytes() - 1, .n_ctx = 256});
    ASSERT_FALSE(refused.ok());
    const std::string& m = refused.error().message;
    EXPECT_NE(m.find("dense"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(all.total_bytes()) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("dense FFN " + format_size(all.resident.dense_ffn)), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace df::test
