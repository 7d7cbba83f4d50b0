// Copies of a hybrid model's recurrent state at a few positions of one sequence (the CPU's in RAM, the GPU's in
// pinned RAM), so that truncate() -- chat's reuse of the conversation's prefix -- can go back although a recurrent
// state cannot be cut: the nearest copy at or before the kept length is restored, and the positions between are
// computed again in the same batch as the next eval's tokens.
//
// An eval of two tokens or more (a prompt) keeps the state at its end and kSnapshotLead positions before it -- a chat
// template renders the last tokens of its generation prompt differently once the reply is in the history -- and the
// newest kStateSnapshots copies stay, their storage reused: a sequence holds at most the live state and
// kStateSnapshots + 1 copies' storage.
#pragma once

#include <cstdint>
#include <cstddef>
#include <utility>
#include <vector>

namespace df::model {

constexpr uint32_t kStateSnapshots = 4;
constexpr uint32_t kSnapshotLead = 8;

// The position of the copy kSnapshotLead before the end of an eval of n_new tokens that runs positions
// [start, end) (recomputed ones first); 0: none (a single token, or no position that far back).
inline uint32_t snapshot_lead(uint32_t start, uint32_t end, size_t n_new) {
  return n_new >= 2 && end > start + kSnapshotLead ? end - kSnapshotLead : 0;
}

// The copies of one sequence, ascending by position, and the storage of dropped ones. State: movable, with a
// uint32_t n_past (the positions the copy has seen).
template <typename State>
class StateCopies {
 public:
  // Storage for a new copy, its contents to be overwritten: the oldest copy once kStateSnapshots are kept, else a
  // dropped one's, else make().
  template <typename Make>
  State take(Make&& make) {
    if (copies_.size() >= kStateSnapshots) {
      State s = std::move(copies_.front());
      copies_.erase(copies_.begin());
      return s;
    }
    if (!spares_.empty()) {
      State s = std::move(spares_.back());
      spares_.pop_back();
      return s;
    }
    return make();
  }
  // s becomes the newest copy; copies at or after its position go.
  void keep(State s) {
    drop_after(s.n_past - 1);
    copies_.push_back(std::move(s));
  }
  // Drops the copies of positions after pos (their storage is kept for take()).
  void drop_after(uint32_t pos) {
    while (!copies_.empty() && copies_.back().n_past > pos) {
      spares_.push_back(std::move(copies_.back()));
      copies_.pop_back();
    }
  }
  // The newest copy at or before pos, or nullptr.
  const State* at_or_before(uint32_t pos) const {
    for (auto it = copies_.rbegin(); it != copies_.rend(); ++it)
      if (it->n_past <= pos) return &*it;
    return nullptr;
  }
  size_t size() const { return copies_.size(); }
  size_t storage() const { return copies_.size() + spares_.size(); }

 private:
  std::vector<State> copies_;  // ascending position
  std::vector<State> spares_;
};

}  // namespace df::model
