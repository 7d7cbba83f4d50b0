// `diskformer serve --backend cuda`: requests at once on the GPU, their decode steps one forward pass over all the
// busy slots (cuda::GpuSession::decode_many), each greedy reply what `run --backend cuda` prints for its prompt.
// The robust gold cases only: a step of several sequences rounds as one of a single sequence only to within the
// kernels' rounding (GpuBatch), which can flip a random model's near-tie, and those cases have none.
#include <fstream>
#include <thread>

#include "gpu/gpu_support.h"
#include "model/gold.h"
#include "server/http_client.h"
#include "server/serve_process.h"
#include "support/cli_run.h"
#include "support/test_paths.h"

namespace df::test {
namespace {

using json = nlohmann::json;

TEST(ServeCuda, ConcurrentGreedyRepliesAreWhatRunPrints) {
  DF_REQUIRE_GPU();
  DF_REQUIRE_SHARED(model, "models/qwen3moe-q4_0.gguf");
  std::vector<GoldCase> cases;
  for (GoldCase& c : read_gold((shared_dir() / "models/qwen3moe-q4_0.gold.json").string()))
    if (c.robust) cases.push_back(std::move(c));
  ASSERT_GE(cases.size(), 2u);
  const int n = 16;
  ServeProcess srv({"-m", model.string(), "-c", "512", "--backend", "cuda", "--parallel", "4"});
  DF_REQUIRE_SERVER(srv);

  // Four requests at a time (the last batch fewer): the slots decode together.
  std::vector<std::string> replies(cases.size());
  for (size_t i0 = 0; i0 < cases.size(); i0 += 4) {
    std::vector<std::thread> clients;
    for (size_t i = i0; i < std::min(cases.size(), i0 + 4); ++i)
      clients.emplace_back([&, i] {
        const HttpResponse r = post_json(
            srv.port(), "/v1/completions",
            {{"prompt", cases[i].prompt}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true}});
        const json j = r.json();
        replies[i] = r.status == 200 && j.contains("choices") ? j["choices"][0]["text"].get<std::string>()
                                                              : "<status " + std::to_string(r.status) + ": " + r.body + ">";
      });
    for (std::thread& t : clients) t.join();
  }
  const HttpResponse m = http(srv.port(), "GET", "/metrics");
  EXPECT_NE(m.body.find("diskformer_gpu_used_bytes"), std::string::npos) << m.body;
  EXPECT_EQ(srv.terminate(), 0) << srv.err();

  const auto prompt_file = temp_dir("serve_cuda") / "prompt.txt";
  for (size_t i = 0; i < cases.size(); ++i) {
    std::ofstream(prompt_file, std::ios::binary | std::ios::trunc) << cases[i].prompt;
    const CliRun ran = run_cli_capture("run --backend cuda -m " + model.string() + " -f " + prompt_file.string() +
                                       " -c 512 -n " + std::to_string(n) + " --temp 0 --ignore-eos");
    ASSERT_EQ(ran.status, 0) << ran.err;
    // The server's JSON carries text: bytes that are not UTF-8 arrive as U+FFFD.
    const std::string expected =
        json::parse(json(ran.out).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
    EXPECT_EQ(replies[i], expected) << "case " << i << ": " << cases[i].prompt;
  }
}

}  // namespace
}  // namespace df::test
