#include "diskformer/gguf/breakdown.h"

#include <map>

namespace df::gguf {

std::string_view category_name(TensorCategory c) {
  switch (c) {
    case TensorCategory::TokenEmbedding: return "token embeddings";
    case TensorCategory::OutputHead: return "output head";
    case TensorCategory::Dense: return "attention and other dense";
    case TensorCategory::RoutedExperts: return "routed experts";
    case TensorCategory::SharedExperts: return "shared experts";
  }
  return "?";
}

TensorCategory categorize(std::string_view name) {
  if (name.starts_with("token_embd") || name.starts_with("per_layer_token_embd")) return TensorCategory::TokenEmbedding;
  if (name == "output.weight") return TensorCategory::OutputHead;
  // An expert tensor's ".scale" (gemma4's per-expert output scale) is one number per expert: the router's step
  // reads it, dense.
  if (name.find("_exps") != std::string_view::npos && !name.ends_with(".scale")) return TensorCategory::RoutedExperts;
  if (name.find("_shexp") != std::string_view::npos) return TensorCategory::SharedExperts;
  return TensorCategory::Dense;
}

int layer_of(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  int layer = 0;
  size_t i = 4;
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
    layer = layer * 10 + (name[i] - '0');
    if (layer > 1'000'000) return -1;
  }
  return i < name.size() && name[i] == '.' ? layer : -1;
}

Breakdown breakdown(const File& f) {
  Breakdown b;
  std::map<int, ExpertLayer> layers;
  for (const auto& t : f.tensors) {
    TensorCategory c = categorize(t.name);
    b.by_category[static_cast<int>(c)] += t.n_bytes;
    b.total += t.n_bytes;
    if (c != TensorCategory::RoutedExperts) continue;
    int layer = layer_of(t.name);
    if (layer < 0 || t.shape.size() < 3) continue;
    auto& el = layers[layer];
    el.layer = static_cast<uint32_t>(layer);
    el.n_experts = static_cast<uint32_t>(t.shape.back());
    el.record_bytes += t.n_bytes / t.shape.back();
  }
  for (auto& [_, el] : layers) b.expert_layers.push_back(el);
  return b;
}

}  // namespace df::gguf
