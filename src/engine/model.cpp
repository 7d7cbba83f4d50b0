#include "diskformer/engine/model.h"

#include <algorithm>

namespace df::engine {

Result<std::unique_ptr<Model>> Model::open(const std::string& path, const ModelOptions& o) {
  std::unique_ptr<Model> m(new Model());
  DF_ASSIGN(m->file_, gguf::read_file(path));
  DF_ASSIGN(m->spec_, model::spec_from_gguf(m->file_));
  DF_ASSIGN(m->tensors_, model::bind_tensors(m->file_, m->spec_));
  m->n_ctx_ = o.n_ctx ? o.n_ctx : std::min<uint32_t>(m->spec_.n_ctx_train ? m->spec_.n_ctx_train : 4096, 4096);
  uint64_t tensor_bytes = 0;
  for (const auto& t : m->file_.tensors) tensor_bytes += t.n_bytes;
  DF_ASSIGN(WeightPlan plan, plan_weights(m->spec_, m->tensors_, tensor_bytes, m->n_ctx_, o.ram_budget));
  DF_ASSIGN(m->weights_, DiskWeights::open(m->file_, m->spec_, m->tensors_, plan, o.host_allocator));
  m->pool_ = std::make_unique<cpu::ThreadPool>(o.threads > 0 ? o.threads : cpu::default_thread_count());
  m->ctx_.pool = m->pool_.get();
  if (o.kernels) m->ctx_.kernels = o.kernels;
  return m;
}

Session::Session(Model& model)
    : model_(model), kv_(model.spec(), model.n_ctx()), forward_(model.spec(), model.weights(), model.context()) {}

Status Session::eval(std::span<const int32_t> tokens, uint32_t n_batch) {
  if (n_batch == 0) n_batch = 1;
  for (size_t i = 0; i < tokens.size(); i += n_batch)
    DF_TRY(forward_.run(tokens.subspan(i, std::min<size_t>(n_batch, tokens.size() - i)), kv_));
  return {};
}

std::span<const float> Session::logits() const {
  const auto& l = forward_.logits();
  return std::span<const float>(l.data(), std::min<size_t>(l.size(), model_.spec().n_vocab));
}

void Session::truncate(uint32_t n_keep) { kv_.n_past = std::min(kv_.n_past, n_keep); }

}  // namespace df::engine
