// diskformer inspect -m MODEL.gguf [--json] [--gpu-budget SIZE [-c N]]: what a GGUF holds, and where its bytes are;
// with --gpu-budget, the GPU residency plan instead.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/fetch.h"
#include "cli/inspect_spec.h"
#include "diskformer/backend/cuda/plan.h"
#include "diskformer/engine/model_files.h"
#include "diskformer/store/store.h"
#include "diskformer/gguf/reader.h"
#include "diskformer/gguf/breakdown.h"
#include "diskformer/util/size.h"

namespace df::cli {

namespace {

using nlohmann::json;

constexpr const char* kSpecialTokens[] = {"bos", "eos", "eot", "eom", "unk", "sep", "pad", "mask"};

std::string shape_text(const gguf::TensorInfo& t) {
  std::string s;
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? " x " : "") + std::to_string(t.shape[i]);
  return s;
}

json value_json(const gguf::Value& v, size_t max_items) {
  if (auto u = std::get_if<uint64_t>(&v.data)) return *u;
  if (auto i = std::get_if<int64_t>(&v.data)) return *i;
  if (auto d = std::get_if<double>(&v.data)) return *d;
  if (auto b = std::get_if<bool>(&v.data)) return *b;
  if (auto s = v.str()) return *s;
  const auto& a = *v.array();
  if (a.items.size() > max_items)
    return json{{"array_of", gguf::value_type_name(a.elem_type)}, {"length", a.items.size()}};
  json out = json::array();
  for (const auto& item : a.items) out.push_back(value_json(item, max_items));
  return out;
}

struct TokenizerSummary {
  std::string model, pre;
  uint64_t vocab_size = 0;
  bool has_template = false;
  std::vector<std::pair<std::string, std::pair<uint64_t, std::string>>> special;  // role -> (id, text)
  std::vector<std::pair<std::string, bool>> flags;                              // add_bos_token, ...
};

TokenizerSummary tokenizer_summary(const gguf::File& f) {
  TokenizerSummary t;
  t.model = f.get_string_or("tokenizer.ggml.model", "");
  t.pre = f.get_string_or("tokenizer.ggml.pre", "");
  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  const gguf::Array* arr = tokens ? tokens->array() : nullptr;
  t.vocab_size = arr ? arr->items.size() : 0;
  t.has_template = f.find("tokenizer.chat_template") != nullptr;
  for (const char* role : kSpecialTokens) {
    std::string key = std::string("tokenizer.ggml.") + role + "_token_id";
    const gguf::Value* v = f.find(key);
    auto id = v ? v->to_u64() : std::nullopt;
    if (!id) continue;
    std::string text;
    if (arr && *id < arr->items.size() && arr->items[*id].str()) text = *arr->items[*id].str();
    t.special.push_back({role, {*id, text}});
  }
  for (const char* flag : {"add_bos_token", "add_eos_token", "add_space_prefix"}) {
    const gguf::Value* v = f.find(std::string("tokenizer.ggml.") + flag);
    if (v && v->to_bool()) t.flags.push_back({flag, *v->to_bool()});
  }
  return t;
}

// Tensor bytes per ggml type, most bytes first (a K-quant mix holds several).
std::vector<std::pair<gguf::GgmlType, uint64_t>> bytes_by_type(const gguf::File& f) {
  std::vector<std::pair<gguf::GgmlType, uint64_t>> out;
  for (const auto& t : f.tensors) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == t.type; });
    if (it == out.end()) {
      out.push_back({t.type, t.n_bytes});
    } else {
      it->second += t.n_bytes;
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

int print_json(const gguf::File& f, const gguf::Breakdown& b) {
  json j;
  j["path"] = f.path;
  j["file_bytes"] = f.file_size;
  j["gguf_version"] = f.version;
  j["alignment"] = f.alignment;
  j["data_offset"] = f.data_offset;
  // Every file the model's tensors lie in: the GGUF, or each part of a split one (tensor offsets are the part's).
  json parts = json::array();
  for (size_t k = 0; k < f.n_parts(); ++k) {
    const size_t n = f.parts.empty() ? f.tensors.size() : f.parts[k].n_tensors;
    parts.push_back({{"path", f.part_path(k)}, {"file_bytes", f.part_size(k)}, {"tensors", n}});
  }
  j["parts"] = parts;
  j["architecture"] = f.architecture();
  std::string arch = f.architecture();
  json hp = json::object(), meta = json::object();
  for (const auto& kv : f.metadata) {
    if (!arch.empty() && kv.key.rfind(arch + ".", 0) == 0) hp[kv.key.substr(arch.size() + 1)] = value_json(kv.value, 64);
    meta[kv.key] = value_json(kv.value, 64);
  }
  j["hyperparameters"] = hp;
  j["metadata"] = meta;
  auto tok = tokenizer_summary(f);
  json special = json::object();
  for (const auto& [role, p] : tok.special) special[role] = {{"id", p.first}, {"text", p.second}};
  json flags = json::object();
  for (const auto& [k, v] : tok.flags) flags[k] = v;
  j["tokenizer"] = {{"model", tok.model}, {"pre", tok.pre},          {"vocab_size", tok.vocab_size},
                    {"special", special}, {"flags", flags},          {"chat_template", tok.has_template}};
  json cats = json::object();
  for (int c = 0; c < 5; ++c) {
    auto cat = static_cast<gguf::TensorCategory>(c);
    cats[std::string(gguf::category_name(cat))] = b.bytes(cat);
  }
  j["bytes_by_category"] = cats;
  json types = json::object();
  for (const auto& [t, n] : bytes_by_type(f)) types[std::string(gguf::type_name(t))] = n;
  j["bytes_by_type"] = types;
  j["tensor_bytes"] = b.total;
  json experts = json::array();
  for (const auto& el : b.expert_layers)
    experts.push_back({{"layer", el.layer}, {"experts", el.n_experts}, {"record_bytes", el.record_bytes}});
  j["expert_layers"] = experts;
  json tensors = json::array();
  for (const auto& t : f.tensors)
    tensors.push_back({{"name", t.name},
                       {"type", gguf::type_name(t.type)},
                       {"shape", t.shape},
                       {"bytes", t.n_bytes},
                       {"offset", t.offset},
                       {"part", t.part},
                       {"category", gguf::category_name(gguf::categorize(t.name))}});
  j["tensors"] = tensors;
  j["spec"] = spec_json(f);
  std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  return 0;
}

// Every text that comes from the file goes through gguf::printable (values through summary(), which uses it):
// metadata may hold escape sequences, and a table on a terminal must not run them.
std::string shown(std::string_view s) { return gguf::printable(s); }

int print_text(const gguf::File& f, const gguf::Breakdown& b) {
  std::string arch = f.architecture();
  std::printf("%s: GGUF v%u, %s, %zu tensors, %zu metadata keys, alignment %u, tensor data at offset %llu\n",
              f.path.c_str(), f.version, format_size(f.file_size).c_str(), f.tensors.size(), f.metadata.size(),
              f.alignment, static_cast<unsigned long long>(f.data_offset));
  const bool split = f.n_parts() > 1;
  if (split) {
    std::printf("split model: %zu parts (tensor offsets are each part's)\n", f.n_parts());
    for (size_t k = 0; k < f.n_parts(); ++k)
      std::printf("  part %zu: %s, %s, %zu tensors\n", k + 1, shown(f.parts[k].path).c_str(),
                  format_size(f.parts[k].file_size).c_str(), f.parts[k].n_tensors);
  }
  std::printf("architecture: %s\n", arch.empty() ? "(none: vocabulary only)" : shown(arch).c_str());
  std::string name = f.get_string_or("general.name", "");
  if (!name.empty()) std::printf("name: %s\n", shown(name).c_str());

  if (!arch.empty()) {
    std::printf("\nhyperparameters:\n");
    for (const auto& kv : f.metadata)
      if (kv.key.rfind(arch + ".", 0) == 0)
        std::printf("  %-40s %s\n", shown(kv.key.substr(arch.size() + 1)).c_str(), kv.value.summary().c_str());
  }

  std::printf("%s", spec_text(f).c_str());

  auto tok = tokenizer_summary(f);
  if (!tok.model.empty()) {
    std::printf("\ntokenizer: model %s, pre-tokenizer %s, vocabulary %llu tokens%s\n", shown(tok.model).c_str(),
                tok.pre.empty() ? "(none)" : shown(tok.pre).c_str(), static_cast<unsigned long long>(tok.vocab_size),
                tok.has_template ? ", chat template" : "");
    for (const auto& [role, p] : tok.special)
      std::printf("  %-5s %-8llu %s\n", role.c_str(), static_cast<unsigned long long>(p.first),
                  gguf::Value::string(p.second).summary().c_str());
    for (const auto& [k, v] : tok.flags) std::printf("  %s = %s\n", k.c_str(), v ? "true" : "false");
  }

  if (!f.tensors.empty()) {
    std::printf("\nbytes by category:\n");
    for (int c = 0; c < 5; ++c) {
      auto cat = static_cast<gguf::TensorCategory>(c);
      uint64_t n = b.bytes(cat);
      std::printf("  %-28s %14llu  %-11s %5.1f%%\n", std::string(gguf::category_name(cat)).c_str(),
                  static_cast<unsigned long long>(n), format_size(n).c_str(), b.total ? 100.0 * n / b.total : 0.0);
    }
    std::printf("  %-28s %14llu  %s\n", "total", static_cast<unsigned long long>(b.total), format_size(b.total).c_str());
    if (!b.expert_layers.empty()) {
      const auto& first = b.expert_layers.front();
      bool uniform = true;
      for (const auto& el : b.expert_layers)
        uniform = uniform && el.n_experts == first.n_experts && el.record_bytes == first.record_bytes;
      if (uniform)
        std::printf("  routed experts: %zu layers x %u experts, one expert record (gate+up+down) %llu bytes (%s)\n",
                    b.expert_layers.size(), first.n_experts, static_cast<unsigned long long>(first.record_bytes),
                    format_size(first.record_bytes).c_str());
      else
        for (const auto& el : b.expert_layers)
          std::printf("  routed experts, layer %u: %u experts, record %llu bytes\n", el.layer, el.n_experts,
                      static_cast<unsigned long long>(el.record_bytes));
    }

    std::printf("\nbytes by type:\n");
    for (const auto& [t, n] : bytes_by_type(f))
      std::printf("  %-28s %14llu  %-11s %5.1f%%\n", std::string(gguf::type_name(t)).c_str(),
                  static_cast<unsigned long long>(n), format_size(n).c_str(), b.total ? 100.0 * n / b.total : 0.0);
    std::printf("\ntensors:\n  %-36s %-8s %-24s %14s %14s%s\n", "name", "type", "shape", "bytes", "offset",
                split ? "  part" : "");
    for (const auto& t : f.tensors) {
      std::printf("  %-36s %-8s %-24s %14llu %14llu", shown(t.name).c_str(),
                  std::string(gguf::type_name(t.type)).c_str(),
                  shape_text(t).c_str(), static_cast<unsigned long long>(t.n_bytes),
                  static_cast<unsigned long long>(t.offset));
      if (split) std::printf("  %4u", t.part + 1);
      std::printf("\n");
    }
  }

  std::printf("\nother metadata:\n");
  for (const auto& kv : f.metadata)
    if (arch.empty() || kv.key.rfind(arch + ".", 0) != 0)
      std::printf("  %-40s %s\n", shown(kv.key).c_str(), kv.value.summary().c_str());
  return 0;
}

// The GPU plan (backend/cuda/plan.h) for this model: text lines or one JSON object on stdout; a refused budget is a
// runtime failure (exit 1) with the itemized numbers.
int print_gpu_plan(const std::string& path, uint64_t budget, uint32_t n_ctx, bool as_json) {
  auto m = engine::open_model_files(path);
  if (!m.ok()) {
    std::fprintf(stderr, "diskformer inspect: %s\n", m.error().message.c_str());
    return 1;
  }
  const engine::ModelFiles& mf = **m;
  const gguf::File& f = mf.file;
  // -c absent: the context the engine commands default to.
  if (n_ctx == 0) n_ctx = std::min<uint32_t>(mf.spec.n_ctx_train ? mf.spec.n_ctx_train : 4096, 4096);
  if (mf.spec.n_ctx_train && n_ctx > mf.spec.n_ctx_train)
    std::fprintf(stderr, "diskformer inspect: warning: -c %u is beyond the %u positions the model was trained on\n",
                 n_ctx, mf.spec.n_ctx_train);
  auto plan = cuda::plan_gpu(mf.spec, mf.tensors, mf.layouts, {.budget = budget, .n_ctx = n_ctx});
  if (!plan.ok()) {
    std::fprintf(stderr, "diskformer inspect: %s\n", plan.error().message.c_str());
    return 1;
  }
  const cuda::GpuPlan& p = *plan;
  if (as_json) {
    json j = p.to_json();
    j["path"] = path;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  const cuda::GpuResident& r = p.resident;
  auto line = [](const char* what, uint64_t n) {
    std::printf("  %-28s %14llu  %s\n", what, static_cast<unsigned long long>(n), format_size(n).c_str());
  };
  std::printf("%s: GPU plan for a budget of %s, context %u, batches of %u: %s\n", path.c_str(),
              format_size(budget).c_str(), p.n_ctx, p.max_batch, p.mode_name().c_str());
  (void)f;
  std::printf("\nresident:\n");
  line("CUDA context (assumed)", r.context);
  if (p.token_embd_on_host)
    std::printf("  %-28s %14s  rows read from pinned host RAM\n", "token embeddings", "0");
  else
    line("token embeddings", r.token_embd);
  line("output head", r.output);
  line("attention", r.attention);
  line("norms", r.norms);
  line("routers", r.routers);
  line("dense FFN", r.dense_ffn);
  if (p.ple_row_slots)
    std::printf("  %-28s %14llu  %s: rows through %u GPU row slots and the id map\n", "per-layer embeddings",
                static_cast<unsigned long long>(r.ple_table), format_size(r.ple_table).c_str(), p.ple_row_slots);
  else if (r.ple_table)
    line("per-layer embeddings", r.ple_table);
  line("KV cache", r.kv_cache);
  if (r.recurrent) line("recurrent state", r.recurrent);
  line("work buffers", r.work);
  line("margin", r.margin);
  line("total", r.total());
  if (p.n_records) {
    std::printf("\nexperts:\n");
    line("record (gate+up+down)", p.record_bytes);
    std::printf("  %-28s %14u  %.1f%% of %u experts resident (at least %u)\n", "slots", p.slots,
                100.0 * p.resident_fraction(), p.n_records, p.min_slots);
    line("slot pool", p.pool_bytes());
  }
  std::printf("\n");
  line("total", p.total_bytes());
  line("left of the budget", budget - p.total_bytes());
  return 0;
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  Args args("inspect", "-m MODEL|-hf ORG/REPO[:QUANT]|--store DIR [--json] [--gpu-budget SIZE [-c N]]");
  args.option("-m,--model", "PATH|URL", "GGUF file to describe (or the first part of a split one; a URL is fetched "
              "into the cache), or a store directory made by ingest");
  add_fetch_options(args);
  args.option("--store", "DIR", "a store made by ingest (its source's header and the store's layout)");
  args.flag("--json", "one JSON object on stdout instead of tables");
  args.option("--gpu-budget", "SIZE", "print the GPU residency plan for this budget (CUDA context included)");
  args.option("-c,--ctx-size", "N", "with --gpu-budget: the context of the plan's KV cache (default: the model's, at "
              "most 4096)");
  if (!args.parse(argc, argv)) return args.exit_code();
  std::optional<std::string> path = args.get("--store");
  if (!path) {
    if (!args.has("--model") && !args.has("--hf-repo"))
      return args.usage_error("-m MODEL (or -hf ORG/REPO, or --store DIR) is required");
    path = fetched_model(args);
    if (!path) return args.exit_code() ? args.exit_code() : 1;
  }
  auto gpu_budget = args.get_size("--gpu-budget");
  auto ctx = args.get_int("--ctx-size", 0, 0, 1 << 24);
  if (!gpu_budget || !ctx) return args.exit_code();
  if (args.has("--ctx-size") && !*gpu_budget) args.warn("-c sizes the KV cache of the GPU plan only: give --gpu-budget");
  if (*gpu_budget) return print_gpu_plan(*path, **gpu_budget, uint32_t(*ctx), args.has("--json"));
  auto r = store::open_model_records(*path);
  if (!r) {
    std::fprintf(stderr, "diskformer inspect: %s\n", r.error().message.c_str());
    return 1;
  }
  const gguf::File& f = r->model;
  auto b = gguf::breakdown(f);
  return args.has("--json") ? print_json(f, b) : print_text(f, b);
}

}  // namespace df::cli
