// Launchers of the int8 tensor-core products (mmq.cu) behind matmul() and moe_matmul_grouped() in matmul.cu.
// Weights Q4_0, Q8_0 or a piece type (kquant.cuh) as the file stores them; activations already quantized to Q8_0 rows
// of act_stride bytes. The piece types take 64-row tiles.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "diskformer/backend/cuda/kernels.h"

namespace df::cuda::mmq {

// A block's tile: weight rows (64 or 128) x tokens (32 or 64). Zeros: chosen from the shape and the GPU's SM count.
// Set, 64 rows take mmq_piece.cu's kernel and 128 rows mmq.cu's. Every tile gives the same results bit for bit (each
// output sums its blocks in index order); tests force each one.
struct Tile {
  int rows = 0;
  int tokens = 0;
};

// y[t][r] = dot(W row r, act row t) for t < n_tok.
void dense(const model::Mat& w, const uint8_t* act, uint64_t act_stride, int64_t n_tok, float* y, cudaStream_t stream,
           Tile tile = {});

// moe_plan's tiles (each <= tile_slots slots of one expert, tile_slots <= 64): block column i of tile (e, first,
// cnt) multiplies expert e with act row order[first + i] / act_div and writes y row order[first + i]. Runs of
// consecutive tiles of one expert are merged into items of up to tile.tokens (default 64) slots.
struct GroupedArgs {
  model::Mat w;  // one expert
  uint64_t expert_stride = 0;
  int32_t n_expert = 0;
  const int32_t* order = nullptr;
  const int32_t* tiles = nullptr;
  int64_t max_tiles = 0;  // moe_max_tiles(n_slots, n_expert, tile_slots): bounds the plan's tile count
  int32_t tile_slots = 0;
  int64_t n_slots = 0;    // the plan's slots, for the choice of tile (0: unknown)
  const uint8_t* act = nullptr;
  uint64_t act_stride = 0;
  int32_t act_div = 1;
  float* y = nullptr;
  cudaStream_t stream = nullptr;
  Tile tile;  // tile.tokens >= tile_slots where set
};
void grouped(const GroupedArgs& a);

}  // namespace df::cuda::mmq
