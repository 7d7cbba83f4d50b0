#include "diskformer/engine/session.h"

#include <algorithm>

#include "engine/sequence.h"

namespace df::engine {

Result<Session> Session::create(Model& model) {
  DF_ASSIGN(std::unique_ptr<Sequence> s, model.backend_model().new_sequence());
  return Session(std::move(s));
}

Session::Session(std::unique_ptr<Sequence> s) : seq_(std::move(s)) {}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

Status Session::eval(std::span<const int32_t> tokens, bool all_logits) { return seq_->eval(tokens, all_logits); }
std::span<const float> Session::logits() { return seq_->logits(); }
int32_t Session::next_token(sampling::Sampler& sampler, std::span<const int32_t> history) {
  return seq_->next_token(sampler, history);
}
uint32_t Session::n_past() const { return seq_->n_past(); }
uint32_t Session::n_ctx() const { return seq_->n_ctx(); }
uint32_t Session::n_vocab() const { return seq_->n_vocab(); }
void Session::truncate(uint32_t n_keep) { seq_->truncate(n_keep); }
SessionStats Session::stats() { return seq_->stats(); }
void Session::set_routing_stats(model::RoutingStats* r) { seq_->set_routing_stats(r); }

SessionStats sessions_together(std::span<const SessionStats> each) {
  if (each.empty()) return {};
  SessionStats all = each.front();
  for (const SessionStats& s : each.subspan(1)) {
    if (all.device_bytes && s.own_device_bytes) *all.device_bytes += *s.own_device_bytes;
    if (all.own_device_bytes && s.own_device_bytes) *all.own_device_bytes += *s.own_device_bytes;
    if (s.device_used_peak) all.device_used_peak = std::max(all.device_used_peak.value_or(0), *s.device_used_peak);
    all.cpu_experts += s.cpu_experts;
    all.expert_host_s += s.expert_host_s;
    all.expert_gpu_wait_s += s.expert_gpu_wait_s;
    all.expert_cpu_s += s.expert_cpu_s;
  }
  return all;
}

}  // namespace df::engine
