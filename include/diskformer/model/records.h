// The records a tier streams, seen as the forward passes read them. A record's image is store::RecordMap's (the
// same bytes whether they come from the GGUF in place or from a repacked store):
//
//   expert (layer L, expert e):  gate [n_ff_expert] x [n_embd], up (same), down [n_embd] x [n_ff_expert], back to
//                                back in that order (each its own type: a K-quant mix may give down another one);
//                                gemma4's fused gate_up [2 n_ff_expert] x [n_embd] is gate then up, then down
//   layer  (layer L):            every dense tensor of blk.L at its 256-byte-aligned offset
//
// A layout holds each matrix's type and shape (data null) and its offset inside the image; expert_at() and
// layer_at() put them over a slot.
#pragma once

#include <cstdint>
#include <vector>

#include "diskformer/model/spec.h"
#include "diskformer/model/weights.h"
#include "diskformer/store/record.h"
#include "diskformer/util/result.h"

namespace df::model {

struct ExpertLayout {
  Mat gate, up, down;  // one expert's shapes and types
  uint64_t gate_at = 0, up_at = 0, down_at = 0;  // their offsets inside the image
  uint64_t record_bytes = 0;
  bool present() const { return record_bytes > 0; }
};

struct LayerLayout {
  LayerWeights shapes;  // absent tensors have rows 0
  struct Placed {
    Mat LayerWeights::*field;
    uint64_t offset;
  };
  std::vector<Placed> placed;  // the present tensors' offsets inside the image
  uint64_t record_bytes = 0;
};

struct RecordLayouts {
  std::vector<ExpertLayout> experts;  // [n_layer]; absent where a layer has no routed experts
  std::vector<LayerLayout> layers;    // [n_layer]
  uint64_t expert_record_bytes = 0;   // the largest expert record (a slot of an expert tier)
  uint64_t layer_record_bytes = 0;    // the largest layer record
};

// Checks every layout against the bound tensors (types, shapes) and the record map; errors name the file, the layer
// and the tensor.
Result<RecordLayouts> record_layouts(const ModelSpec& spec, const ModelTensors& tensors, const store::RecordMap& map);

// The matrices of an expert whose image is at `image`.
ExpertWeights expert_at(const ExpertLayout& l, const uint8_t* image);
// The dense tensors of a layer whose image is at `image`.
LayerWeights layer_at(const LayerLayout& l, const uint8_t* image);

}  // namespace df::model
