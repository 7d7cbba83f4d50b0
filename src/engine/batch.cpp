#include "diskformer/engine/batch.h"

#include <vector>

#include "diskformer/util/check.h"
#include "engine/sequence.h"

namespace df::engine {

Status BackendModel::decode_batch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens) {
  for (size_t i = 0; i < seqs.size(); ++i) DF_TRY(seqs[i]->eval(tokens.subspan(i, 1), false));
  return {};
}

Status decode_batch(Model& model, std::span<Session* const> sessions, std::span<const int32_t> tokens) {
  DF_CHECK(sessions.size() == tokens.size());
  if (sessions.empty()) return {};
  std::vector<Sequence*> seqs;
  seqs.reserve(sessions.size());
  for (size_t i = 0; i < sessions.size(); ++i) {
    Sequence* s = sessions[i]->seq_.get();
    if (s->n_past() >= s->n_ctx())
      return Error{"context overflow: session " + std::to_string(i) + " of the step has used all " +
                   std::to_string(s->n_ctx()) + " positions of its context (-c)"};
    seqs.push_back(s);
  }
  return model.backend_model().decode_batch(seqs, tokens);
}

}  // namespace df::engine
