// Work on a stream captured into CUDA graphs and replayed: graph `key` is captured from what a function queues on
// the stream the first time that key runs, and every later run of the key replays it with one launch instead of
// issuing each launch again (a decode step's kernels are short enough that issuing them is most of their time).
//
// The captured work must read everything that changes between runs from device memory (positions, ids), keep its
// buffers' addresses, and queue work on that stream alone; clear() drops the graphs where a buffer moves.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace df::cuda {

class StreamGraphs {
 public:
  StreamGraphs() = default;
  ~StreamGraphs() { clear(); }
  StreamGraphs(const StreamGraphs&) = delete;
  StreamGraphs& operator=(const StreamGraphs&) = delete;

  // Queues graph `key` on stream s, captured from work() first where the key has none.
  template <class F>
  void run(cudaStream_t s, size_t key, F&& work) {
    if (!has(key)) {
      begin(s);
      work();
      end(s, key);
    }
    launch(s, key);
  }
  void clear();

 private:
  bool has(size_t key) const { return key < execs_.size() && execs_[key] != nullptr; }
  void begin(cudaStream_t s);
  void end(cudaStream_t s, size_t key);
  void launch(cudaStream_t s, size_t key);

  std::vector<cudaGraphExec_t> execs_;  // by key; null where none was captured
};

}  // namespace df::cuda
