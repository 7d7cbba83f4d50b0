#include "cli/inspect_spec.h"

#include <cstdio>

#include "diskformer/model/spec.h"

namespace df::cli {

namespace {

using nlohmann::json;

std::string format(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string kv_text(uint32_t il, const model::LayerSpec& l) {
  return l.kv_layer == il ? "own" : "layer " + std::to_string(l.kv_layer);
}

}  // namespace

std::string spec_text(const gguf::File& f) {
  if (f.architecture().empty()) return "";
  auto r = model::spec_from_gguf(f);
  // The reason quotes the file's own texts: escaped, as every text inspect shows.
  if (!r.ok()) return "\nspec: not runnable: " + gguf::printable(r.error().message) + "\n";
  const model::ModelSpec& s = *r;
  std::string out = "\nspec: " + std::string(model::family_name(s.family));
  out += format(", %u layers, d=%u, vocabulary %u, context %u, rms eps %g\n", s.n_layer, s.n_embd, s.n_vocab,
                s.n_ctx_train, double(s.norm_eps));
  if (s.moe())
    out += format("  routed experts: %u per layer, top %u, expert width %u\n", s.n_expert, s.n_expert_used,
                  s.n_ff_expert);
  if (s.layers.empty()) {
    out += format("  attention: %u heads, %u KV heads, head size %u/%u, RoPE %u dims base %g%s\n", s.n_head,
                  s.n_head_kv, s.head_dim_k, s.head_dim_v, s.n_rot, double(s.rope_base),
                  s.qk_norm ? ", q/k norms" : "");
    if (!s.moe()) out += format("  feed-forward width %u\n", s.n_ff);
    return out;
  }
  if (s.sliding_window) out += format("  sliding window %u positions\n", s.sliding_window);
  if (s.n_embd_per_layer) out += format("  per-layer embeddings: %u per layer\n", s.n_embd_per_layer);
  if (s.final_logit_softcap != 0.0f) out += format("  final logit soft cap %g\n", double(s.final_logit_softcap));
  if (f.tensor("rope_freqs.weight")) out += "  full layers divide their RoPE frequencies by rope_freqs.weight\n";
  out += format("  %-6s %-8s %6s %8s %9s %6s %10s %-9s %7s\n", "layer", "kind", "heads", "KV heads", "head size",
                "RoPE", "RoPE base", "KV", "FFN");
  for (uint32_t il = 0; il < s.n_layer; ++il) {
    const model::LayerSpec& l = s.layers[il];
    out += format("  %-6u %-8s %6u %8u %9u %6u %10g %-9s %7u\n", il, l.sliding ? "sliding" : "full", l.n_head,
                  l.n_head_kv, l.head_dim_k, l.n_rot, double(l.rope_base), kv_text(il, l).c_str(), l.n_ff);
  }
  return out;
}

json spec_json(const gguf::File& f) {
  if (f.architecture().empty()) return nullptr;
  auto r = model::spec_from_gguf(f);
  if (!r.ok()) return {{"error", r.error().message}};
  const model::ModelSpec& s = *r;
  json j = {{"family", model::family_name(s.family)},
            {"n_layer", s.n_layer},
            {"n_embd", s.n_embd},
            {"n_vocab", s.n_vocab},
            {"n_ctx_train", s.n_ctx_train},
            {"n_expert", s.n_expert},
            {"n_expert_used", s.n_expert_used},
            {"n_ff_expert", s.n_ff_expert},
            {"sliding_window", s.sliding_window},
            {"n_embd_per_layer", s.n_embd_per_layer},
            {"final_logit_softcap", s.final_logit_softcap}};
  json layers = json::array();
  for (uint32_t il = 0; il < s.n_layer; ++il) {
    const model::LayerSpec l = s.layer(il);
    layers.push_back({{"sliding", l.sliding},
                      {"n_head", l.n_head},
                      {"n_head_kv", l.n_head_kv},
                      {"head_dim", l.head_dim_k},
                      {"n_rot", l.n_rot},
                      {"rope_base", l.rope_base},
                      {"kv_layer", l.kv_layer},
                      {"n_ff", l.n_ff}});
  }
  j["layers"] = layers;
  return j;
}

}  // namespace df::cli
